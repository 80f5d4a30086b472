"""Durable file operations for the warehouse: atomic replace, durable rename, removal.

The loader's crash safety rests on three POSIX facts: ``rename`` within one filesystem is
atomic, a rename is durable only once its directory is fsynced, and a file's bytes are durable
only once the file is fsynced. Everything that must survive a crash goes through here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: readers see the old bytes or the new, never a mix, and
    after a crash the file holds one of the two (write temp, fsync, rename, fsync dir)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


def rename_durable(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` (same filesystem; ``target`` must not exist) and make the
    move durable. Raises FileExistsError if ``target`` exists: a directory is never merged."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        raise FileExistsError(f"{target} exists; refusing to merge {source} into it")
    os.rename(source, target)
    fsync_dir(target.parent)
    if source.parent != target.parent:
        fsync_dir(source.parent)


def remove_tree(path: Path) -> None:
    """Delete ``path`` if it exists (a straggling writer may still add files: retried once)."""
    for _ in range(2):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
    shutil.rmtree(path)
