"""A child process that appends until it is killed: the harness of the kill -9 tests.

`run_until_killed(child, delay_s)` forks; the child (`child(write_fd)`) reports "open" once
its log is open, then one line per acknowledged append, and never returns. The parent reads
the lines, sends SIGKILL `delay_s` after "open" (unless an armed fault killed the child
first), reaps it, and returns the acknowledged lines split into ints: exactly what the child
was told was appended before it died.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable


def run_until_killed(child: Callable[[int], None], delay_s: float) -> list[list[int]]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(write_fd)
        os._exit(1)  # a child never returns; if it does, that is a failure
    os.close(write_fd)
    data, deadline = b"", None
    while True:
        ready, _, _ = select.select([read_fd], [], [], 0.005)
        if ready:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break  # the child died (an armed fault killed it)
            data += chunk
            if deadline is None and b"open\n" in data:
                deadline = time.monotonic() + delay_s
        if deadline is not None and time.monotonic() >= deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, data[-300:]
    lines = data.decode().splitlines()
    assert not any(line.startswith("error") for line in lines), lines[-3:]
    return [list(map(int, line.split())) for line in lines if line != "open"]


def appender(open_log: Callable, batch: Callable[[int], bytes], *, round_no: int,
             fault: str | None, countdown: int, arm_before_open: bool,
             report_snapshot: bool = False):
    """The child of a round: open the log, append `batch(i)` for i = 0, 1, ... (at time
    `round_no` ms) and report each acknowledgement ("<base offset> <round> <i>", plus the
    log's snapshot numbers if asked),
    until killed by SIGKILL or by the armed fault (`faults.kill_self` after `countdown`
    passes). Arming before the open puts the fault inside recovery too."""
    from appliance.segments import faults

    def child(out: int) -> None:
        try:
            if fault and arm_before_open:
                faults.arm(fault, faults.kill_self, countdown=countdown)
            log = open_log()
            if fault and not arm_before_open:
                faults.arm(fault, faults.kill_self, countdown=countdown)
            os.write(out, b"open\n")
            i = 0
            while True:
                info = log.append(batch(i), now_ms=round_no)
                numbers = " " + " ".join(map(str, log.snapshot())) if report_snapshot else ""
                os.write(out, f"{info.base_offset} {round_no} {i}{numbers}\n".encode())
                i += 1
        except BaseException as exc:  # noqa: BLE001 - report, then die without pytest's cleanup
            os.write(out, f"error {exc!r}\n".encode())
            os._exit(1)

    return child
