"""Many small checkpoint replacements made durable together: one `syncfs` before the renames
and one after, instead of two fsyncs per file.

Why: a worker that takes on a topic of many partitions (its creation, a failover that makes
it leader of a third of the fleet's partitions, a restart) replaces two small files per
partition (``partition.state``, ``leader-epoch-checkpoint``), each by `replace_durably`'s
write, fsync, rename, fsync of the directory. With 2,000 partitions a worker spent seconds of
its loop in fsync (issue 26: 6.6 ms a partition when an appliance died), while its peers'
fetches and its clients waited.

Inside `durable_together()`, `layout.replace_durably` writes the temporary file (so a full
disk still fails where it did) and leaves it here; at the end every temporary file is made
durable by one `syncfs` per filesystem, renamed over its target, and the renames made durable
by one more. The order is the same as one file at a time (a file's bytes are on disk before
its name is), so a crash anywhere leaves each checkpoint whole, old or new. The scope must
cover only work that appends nothing a client is told is durable: the worker wraps the
synchronous handling of one topic change, and every append with the new leader epoch comes
after it, from the loop. Where `syncfs` is missing, each file and directory is fsynced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from appliance.segments import filesystems

log = logging.getLogger(__name__)

# per thread (the cleaner's and the group committer's threads write files of their own, one
# at a time, while the loop's thread may be inside a scope): target path -> its new text
_scope = threading.local()


def pending() -> dict[str, str] | None:
    """This thread's open scope's replacements (None outside a scope): `replace_durably`
    adds to it."""
    return getattr(_scope, "pending", None)


@contextlib.contextmanager
def durable_together():
    """Defer the fsyncs and renames of the checkpoint replacements made inside; do them
    together on the way out. Nested scopes join the outermost one. Raises OSError from the
    end (the caller's storage error), after trying every file."""
    if pending() is not None:
        yield
        return
    _scope.pending = replacements = {}
    try:
        yield
    finally:
        _scope.pending = None
        if replacements:
            finish(replacements)


def finish(replacements: dict[str, str]) -> None:
    """Temporary files durable, then renamed over their targets, then the renames durable.
    A temporary file that is gone (its directory deleted, or swept as a leftover by a later
    open in the same scope) is written again if its directory is still there."""
    renamed = []
    for path, text in replacements.items():
        tmp = path + ".tmp"
        if not os.path.exists(tmp):
            if not os.path.isdir(os.path.dirname(path) or "."):
                continue  # the partition was deleted meanwhile
            _write(tmp, text)
        renamed.append((tmp, path))
    _sync([tmp for tmp, _ in renamed], files=True)
    for tmp, path in renamed:
        os.replace(tmp, path)
    _sync([os.path.dirname(path) or "." for _, path in renamed], files=False)


def _write(tmp: str, text: str) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _sync(paths: list[str], *, files: bool) -> None:
    """One syncfs per filesystem the paths are on; fsync of each where syncfs is missing."""
    if filesystems.AVAILABLE:
        devices: dict[int, str] = {}
        for path in paths:
            devices.setdefault(os.stat(path).st_dev, path)
        for path in devices.values():
            filesystems.sync_filesystem_of(path)
        return
    for path in dict.fromkeys(paths):
        fd = os.open(path, os.O_RDONLY if files else os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
