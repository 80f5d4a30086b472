"""Why a worker exited, as its exit status: the supervisor's restart decisions key on these."""

from __future__ import annotations

import signal

OK = 0
BOOT_ERROR = 3  # cannot start (bad config, a bug at start-up): restarting will not help
DISK_FAILED = 4  # its log dir cannot be read or written: take only this worker offline

NAMES = {OK: "exited cleanly", BOOT_ERROR: "boot error", DISK_FAILED: "disk failed"}


def describe_exit(code: int) -> str:
    """`waitstatus_to_exitcode` output in words: negative codes are signals."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return NAMES.get(code, f"exit status {code}")
