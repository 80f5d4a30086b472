"""Named fault points for crash tests: deterministic kills where the loader's crash windows
are, instead of racing a ``kill -9`` against a timer (the storage engine's habit).

``KLOG_PIPELINE_FAULT=<point>`` makes the process that reaches ``fault_point(<point>)`` kill
itself with SIGKILL; ``KLOG_PIPELINE_FAULT=<point>:sleep=<seconds>`` makes it pause there
instead (a window for a test's own ``kill -9``); ``<point>:raise`` raises `FaultInjected`, a
BaseException the loader does not catch, which leaves the disk as a crash there would (for
in-process tests). Unset, a fault point costs one dict lookup. Executors inherit the variable
from a local master's environment.
"""

from __future__ import annotations

import os
import signal
import time

VARIABLE = "KLOG_PIPELINE_FAULT"


class FaultInjected(BaseException):
    """Raised at a fault point set to ``raise``: the process "dies" there."""


def fault_point(name: str) -> None:
    wanted = os.environ.get(VARIABLE)
    if not wanted:
        return
    point, _, action = wanted.partition(":")
    if point != name:
        return
    if action.startswith("sleep="):
        time.sleep(float(action[len("sleep="):]))
    elif action == "raise":
        raise FaultInjected(name)
    else:
        os.kill(os.getpid(), signal.SIGKILL)
