"""Named fault-injection points for crash and error tests (Redpanda style).

The engine calls :func:`point` at the places where a crash or an I/O error matters; in normal
operation nothing is armed and a point costs one dict lookup. A test arms a point with an action:
an exception instance to raise (``OSError(errno.EIO, ...)``), or a callable (``kill_self``,
which SIGKILLs the process, for crash tests that must stop at an exact place). ``countdown``
lets the point pass that many times first, so a seeded test can stop at the n-th append.

Points (the engine's contract with its tests):

====================================  ============================================================
``segment.torn_write``                the first batch's head and half its payload are written
``segment.after_write``               all bytes written and patched; indexes and offsets not yet
``segment.before_allocate``           a new segment file is about to be preallocated
``log.roll.before_seal``              the new segment exists, the old one is not trimmed yet
``log.after_roll``                    the new segment exists, the old one is sealed
``log.retention.after_rename``        expired segments renamed to .deleted, checkpoint not written
``log.flush.before_sync``             just before fdatasync in a flush, or the syncfs of many logs
``cleaner.after_cleaned``             a cleaned segment's ``.cleaned`` files written and synced
``cleaner.after_promote``             they are renamed ``.swap`` (the swap is decided)
``cleaner.after_replace_live``        the swap's files hold the live names of its first segment
``cleaner.after_retire``              the group's other segments are renamed ``.deleted``
``cleaner.batch``                     the cleaner read a batch (a seeded countdown: any moment)
====================================  ============================================================

Only the test process arms points; the module state is per process, so a forked child arms its
own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

POINTS = frozenset(
    {
        "segment.torn_write",
        "segment.after_write",
        "segment.before_allocate",
        "log.roll.before_seal",
        "log.after_roll",
        "log.retention.after_rename",
        "log.flush.before_sync",
        "cleaner.after_cleaned",
        "cleaner.after_promote",
        "cleaner.after_replace_live",
        "cleaner.after_retire",
        "cleaner.batch",
    }
)

Action = BaseException | Callable[[], None]
ARMED: dict[str, list] = {}  # name -> [action, countdown]; hot paths test ``if ARMED:`` first


def arm(name: str, action: Action, *, countdown: int = 0) -> None:
    """Make ``point(name)`` run ``action`` after passing ``countdown`` times. Re-arming replaces."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(sorted(POINTS))}")
    ARMED[name] = [action, countdown]


def disarm(name: str | None = None) -> None:
    """Disarm one point, or all of them."""
    if name is None:
        ARMED.clear()
    else:
        ARMED.pop(name, None)


def armed(name: str) -> bool:
    return name in ARMED


def point(name: str) -> None:
    """Run the armed action of ``name`` (once its countdown has run out); a no-op otherwise."""
    entry = ARMED.get(name)
    if entry is None:
        return
    if entry[1] > 0:
        entry[1] -= 1
        return
    del ARMED[name]
    action = entry[0]
    if isinstance(action, BaseException):
        raise action
    action()


def kill_self() -> None:
    """SIGKILL this process: no finally blocks, no atexit, exactly like a crash."""
    os.kill(os.getpid(), signal.SIGKILL)
