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
