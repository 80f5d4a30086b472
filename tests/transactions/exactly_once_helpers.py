"""What the exactly-once tests share: the input they feed, the loop process they kill and
restart (``exactly_once_loop.py``), and the check of the output a read_committed consumer
sees: every input record transformed exactly once, in per-partition order."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import REPO

# the loop's consumer has a 3 s session: a killed loop's member leaves the group soon
QUICK_SESSIONS = {"group.min.session.timeout.ms": "1000"}


def feed(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records ``<p>:<i>`` on each partition (idempotent, acks=all)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(per_partition):
        for partition in range(partitions):
            p.produce(topic, value=f"{partition}:{i}".encode(), key=str(partition).encode(),
                      partition=partition)
    assert p.flush(30) == 0


def expected(partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    return {p: [f"out:{p}:{i}".encode() for i in range(per_partition)]
            for p in range(partitions)}


def read_output(bootstrap: str, topic: str, partitions: int, total: int,
                timeout_s: float = 90.0, quiet_s: float = 2.0) -> dict[int, list[bytes]]:
    """The output as a read_committed consumer sees it: read from the start until ``total``
    records have come and nothing more for ``quiet_s`` (a duplicate would show), or until
    ``timeout_s``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    count, last_new = 0, time.monotonic()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            records = c.consume(num_messages=500, timeout=0.5)
            for r in records:
                if r.error() is None:
                    seen[r.partition()].append(r.value())
                    count += 1
                    last_new = time.monotonic()
            if count >= total and time.monotonic() - last_new >= quiet_s:
                break
    finally:
        c.close()
    return seen


def drain(loop: Loop, bootstrap: str, topic: str, partitions: int, total: int,
          timeout_s: float = 120.0) -> dict[int, list[bytes]]:
    """Let the loop finish the input and return the output (``read_output``). A loop that
    makes no progress for a while is killed with -9 and started again, as a service's
    liveness probe would (see ``Loop.wait_commits``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = read_output(bootstrap, topic, partitions, total, timeout_s=15)
        if sum(map(len, seen.values())) >= total or time.monotonic() > deadline:
            return seen
        loop.kill()
        loop.start()


def first_difference(seen: dict[int, list[bytes]], wanted: dict[int, list[bytes]]) -> str:
    """What is wrong with the output, said briefly ("" when nothing)."""
    for p, values in wanted.items():
        got = seen.get(p, [])
        if got == values:
            continue
        for i, (a, b) in enumerate(zip(got, values, strict=False)):
            if a != b:
                return f"partition {p}: at {i} got {a!r}, wanted {b!r} ({len(got)} records)"
        return f"partition {p}: {len(got)} records, wanted {len(values)}"
    return ""


def appliance_pids(appliance) -> list[int]:
    """The supervisor's pid and its workers': what a kill -9 of the whole appliance kills
    (as a machine that loses power; the supervisor alone would leave its workers to stop
    gracefully, overlapping the next start)."""
    return [appliance.process.pid, *(p for p in appliance.pids().values() if p > 0)]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(_gone(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} still run"
        time.sleep(0.02)


def kill_9(appliance, pids: list[int] | None = None) -> None:
    """kill -9 of every process of the appliance; returns once they are gone."""
    pids = pids or appliance_pids(appliance)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    appliance.stop()  # reaps the supervisor
    wait_gone(pids)


class Loop:
    """The loop process: started, watched (its ``committed <n>`` lines), killed with -9."""

    def __init__(self, workdir: Path, bootstrap: str, input_topic: str, output_topic: str,
                 group: str, transactional_id: str, *, batch: int = 10,
                 instance: str | None = None, pause: float = 0.0):
        self.workdir = workdir
        self.args = [bootstrap, input_topic, output_topic, group, transactional_id,
                     "--batch", str(batch), "--pause", str(pause)]
        if instance:
            self.args += ["--instance", instance]
        self.process: subprocess.Popen | None = None
        self.output: Path | None = None
        self.runs = 0

    def start(self, *, kill_after_commit: list[int] | None = None) -> Loop:
        self.runs += 1
        self.output = self.workdir / f"loop-{self.runs}.log"
        extra = (["--kill-after-commit", ",".join(map(str, kill_after_commit))]
                 if kill_after_commit else [])
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.transactions.exactly_once_loop", *self.args,
                 *extra], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        return self

    def commits(self) -> int:
        """Transactions this run has committed."""
        if self.output is None or not self.output.exists():
            return 0
        return self.output.read_bytes().count(b"committed ")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def ensure_running(self) -> None:
        """A loop that exited (an error it does not retry) is started again."""
        if not self.alive():
            self.start()

    def wait_commits(self, more: int, timeout_s: float = 10.0) -> bool:
        """Until this run has committed ``more`` more transactions (restarting a loop that
        exited); False at the timeout, after killing the loop with -9 and starting it again
        (a liveness probe's restart: librdkafka 2.16's send_offsets_to_transaction can hang
        past its timeout once the client re-bootstraps after the appliance died,
        confluentinc/librdkafka#5456 and #5511). Also False when the input is all done."""
        target = self.commits() + more
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.commits() >= target:
                return True
            if not self.alive():
                self.start()
                target = more
            time.sleep(0.05)
        self.kill()
        self.start()
        return False

    def tail(self) -> str:
        return "" if self.output is None else self.output.read_text(errors="replace")[-3000:]
