"""Waiting in a test for something another process does: poll, and fail naming what did not
happen. Shared by the fleet, fault and group tests."""

import time


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    """The predicate's first truthy value, polled every `interval_s`; AssertionError naming
    `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
