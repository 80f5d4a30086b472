"""Replacing a small file so that a crash leaves the old contents or the new, never a mix.

The catalog (topics, producer id blocks, the cluster id) and the security files (SCRAM users,
ACLs) are rewritten whole: a temporary file beside the target, written to the end (os.write
may write less than asked), fsync'd, renamed over the target, and the directory fsync'd so the
rename itself survives a power cut. The temporary file starts with a dot and ends in .tmp, so
no reader that lists the directory by suffix (``*.json``) picks it up.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``; the new file is created with ``mode`` (the umask may
    narrow it, never widen it), so a private file is never readable by others, even briefly."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
