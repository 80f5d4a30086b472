"""The process's descriptor limit (RLIMIT_NOFILE), as the storage engine reports it.

Why here: a log needs one descriptor per segment (``.log``; the indexes hold none, see
``fdless_map.py``), so with many partitions EMFILE is the engine's likeliest resource error.
When it happens the error should say which limit was hit and what to change, not only
"Too many open files": :func:`note` is appended to such a StorageError's message and to the
worker's refusal of a CreateTopics that would not fit (``appliance/descriptor_limits.py``).
"""

from __future__ import annotations

import errno
import os
import resource

EXHAUSTED = (errno.EMFILE, errno.ENFILE)


def limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of this process."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def open_count() -> int:
    """Descriptors this process holds now (Linux: /proc/self/fd; about 1 ms per 5,000)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return -1


def room() -> int:
    """Descriptors this process may still open (a large number when /proc is unreadable)."""
    held = open_count()
    return limits()[0] - held if held >= 0 else 1 << 30


def note(code: int | None = errno.EMFILE) -> str:
    """What limit was reached and what to change, for an error message."""
    soft, hard = limits()
    if code == errno.ENFILE:
        return ("the system-wide descriptor table is full (fs.file-max); see README "
                "'Limits'")
    return (f"the worker holds {open_count()} descriptors of RLIMIT_NOFILE {soft} "
            f"(hard {hard}): raise `ulimit -n` / LimitNOFILE= (README 'Limits'); retry "
            f"after descriptors are freed")
