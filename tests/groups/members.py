"""Running group members (tests/groups/member.py) as processes and reading what they logged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

MEMBER = Path(__file__).with_name("member.py")


class MemberProcess:
    def __init__(self, client: str, bootstrap: str, group: str, topic: str, out: Path, *,
                 instance_id: str | None = None, session_ms: int = 6000):
        self.client, self.out = client, out
        command = [sys.executable, str(MEMBER), client, bootstrap, group, topic, str(out),
                   "--session-ms", str(session_ms)]
        if instance_id:
            command += ["--instance-id", instance_id]
        self.stderr = open(out.with_suffix(".stderr"), "wb")  # noqa: SIM115
        self.process = subprocess.Popen(command, stderr=self.stderr,
                                        stdout=subprocess.DEVNULL)
        self.killed_at: float | None = None
        # when the test asked it to stop: it leaves the group then, and clients log their
        # closing revoke after their LeaveGroup (aiokafka does), so a partition the group has
        # already handed to another member may still look owned here for a moment
        self.stopped_at: float | None = None

    def events(self) -> list[dict]:
        if not self.out.exists():
            return []
        # the member may be writing a line right now: only lines it has ended are whole
        whole = self.out.read_bytes().rpartition(b"\n")[0]
        return [orjson.loads(line) for line in whole.splitlines() if line]

    def owned(self) -> set[int]:
        """What the member owns according to its last rebalance callback."""
        current: set[int] = set()
        for e in self.events():
            if e["event"] == "assign":  # eager: after a revoke of all; cooperative: added
                current |= set(e["partitions"])
            elif e["event"] == "revoke":
                current -= set(e["partitions"])
        return current if self.killed_at is None else set()

    def consumed(self) -> set[str]:
        return {item[2] for e in self.events() if e["event"] == "records"
                for item in e["items"]}

    def ownership_intervals(self) -> dict[int, list[tuple[float, float]]]:
        """Per partition, [from, to) times the member owned it (to = kill or exit time)."""
        intervals: dict[int, list[tuple[float, float]]] = {}
        since: dict[int, float] = {}
        end = self.killed_at
        for e in self.events():
            if e["event"] == "assign":
                for p in e["partitions"]:
                    since.setdefault(p, e["t"])
            elif e["event"] == "revoke":
                for p in e["partitions"]:
                    if p in since:
                        intervals.setdefault(p, []).append((since.pop(p), e["t"]))
            elif e["event"] == "closed" and end is None:
                end = e["t"]
        end = end if end is not None else time.monotonic()
        for p, start in since.items():
            intervals.setdefault(p, []).append((start, end))
        if self.stopped_at is not None:  # what it held once asked to leave is not counted
            intervals = {p: [(s, min(e, self.stopped_at)) for s, e in spans
                             if s < self.stopped_at] for p, spans in intervals.items()}
        return intervals

    def kill9(self) -> None:
        self.killed_at = time.monotonic()
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.process.poll() is None:
            self.stopped_at = time.monotonic()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()
        return self.process.returncode

    def stderr_text(self) -> str:
        path = self.out.with_suffix(".stderr")
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def overlaps(members: list[MemberProcess]) -> list[str]:
    """Every moment two members owned the same partition, described."""
    found = []
    owned = [(m, m.ownership_intervals()) for m in members]
    for i, (a, a_owned) in enumerate(owned):
        for b, b_owned in owned[i + 1:]:
            for partition, spans in a_owned.items():
                for start, end in spans:
                    for other_start, other_end in b_owned.get(partition, []):
                        if start < other_end and other_start < end:
                            found.append(f"partition {partition}: {a.client} "
                                         f"[{start:.3f}, {end:.3f}) and {b.client} "
                                         f"[{other_start:.3f}, {other_end:.3f})")
    return found
