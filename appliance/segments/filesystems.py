"""syncfs(2): everything written to one filesystem made durable by one call.

Why: a durable file written a piece at a time costs an fsync each, and each fsync a commit of
the filesystem's journal. When many files are to be made durable at once (a worker taking on
thousands of partitions writes two checkpoints for each; a producer writing one message to
each of thousands of partitions with acks=all asks for each log to be synced), one syncfs
commits them together: it writes back every dirty page of the filesystem and waits for it,
which is what an fsync of each of those files would have done, and more. Linux has had it
since 2.6.39; where the C library lacks it, callers fsync file by file.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)


def _load():
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        log.info("syncfs is not available: files are fsynced one by one")
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _kernel() -> tuple[int, ...]:
    release = os.uname().release.split("-")[0].split(".")
    return tuple(int(part) for part in release[:2] if part.isdigit())


_syncfs = _load()
AVAILABLE = _syncfs is not None
# Since Linux 5.8 syncfs reports a writeback error of any file of the filesystem that came
# after the descriptor it is called on was opened (each error once per descriptor); before,
# it returned 0 even when data was lost. Only then may it stand for the fsyncs of a set of
# files that must be durable (group_commit.py).
REPORTS_ERRORS = AVAILABLE and _kernel() >= (5, 8)


def syncfs(fd: int, path: str = "") -> None:
    """Make the filesystem holding the open `fd` durable. Raises OSError (with `path` named),
    also when syncfs is not available (check AVAILABLE first)."""
    if _syncfs is None:
        raise OSError(0, "syncfs is not available", path)
    if _syncfs(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"syncfs: {os.strerror(error)}", path)


def sync_filesystem_of(path: str) -> None:
    """syncfs of the filesystem `path` (a file or a directory) lies on. Raises OSError."""
    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs(fd, path)
    finally:
        os.close(fd)
