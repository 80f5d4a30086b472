"""Kafka's on-disk layout of a partition, and the partition's small state file.

Layout (Kafka's, so ``kafka-dump-log`` habits carry over)::

    <log.dir>/<topic>-<partition>/
        00000000000000000000.log          record batches, byte for byte as produced
        00000000000000000000.index        offset index: (relative offset int32, position int32)
        00000000000000000000.timeindex    time index: (timestamp int64, relative offset int32)
        00000000000000000000.txnindex     aborted transactions (txn_index.py), when any
        00000000000000368769.log ...      the next segment, named by its base offset
        00000000000000000000.log.deleted  a deleted segment, removed after file.delete.delay.ms
        partition.state                   log start offset and the clean-shutdown flag

``partition.state`` replaces two of Kafka's per-log-dir files (``log-start-offset-checkpoint``
and ``.kafka_cleanshutdown``) with one per partition, so a worker never rewrites a shared file.
It is text, ``key=value`` lines, written to a temporary file, fsynced and renamed over the old
one, then the directory is fsynced (inside `durable_together()` the fsyncs are shared by many
files): after a crash it is either the old or the new version. A missing or unreadable state
file means "unclean shutdown, log start = first segment", which is why a new partition
writes none.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from . import durable_together

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
STATE_FILE = "partition.state"
_STATE_VERSION = "1"
OFFSET_DIGITS = 20


def partition_dir(log_dir: str | os.PathLike, topic: str, partition: int) -> str:
    """``<log_dir>/<topic>-<partition>``, Kafka's directory name for a partition: the one
    place this rule is written (owners, readers and tests all ask here)."""
    return os.path.join(log_dir, f"{topic}-{partition}")


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    """``<directory>/00000000000000000042<suffix>``."""
    return os.path.join(directory, f"{base_offset:0{OFFSET_DIGITS}d}{suffix}")


def list_segment_bases(directory: str) -> list[int]:
    """Base offsets of the ``.log`` files in ``directory``, ascending; other files are ignored."""
    bases = []
    for name in os.listdir(directory):
        stem, dot, suffix = name.partition(".")
        if dot and suffix == "log" and len(stem) == OFFSET_DIGITS and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def leftover_files(directory: str, bases: list[int]) -> list[str]:
    """Paths left behind by a crash: ``.deleted`` files, temporary files, and indexes whose
    ``.log`` is gone. Safe to remove before the log opens."""
    live = {f"{b:0{OFFSET_DIGITS}d}" for b in bases}
    found = []
    for name in os.listdir(directory):
        stem, _, suffix = name.partition(".")
        orphan_index = suffix in ("index", "timeindex", "txnindex") and stem not in live
        if name.endswith((DELETED_SUFFIX, ".tmp")) or orphan_index:
            found.append(os.path.join(directory, name))
    return found


def fsync_directory(directory: str) -> None:
    """Make created, renamed and removed names in ``directory`` durable. Raises OSError."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartitionState(NamedTuple):
    log_start_offset: int | None  # None: unknown, use the first segment's base offset
    clean_shutdown: bool
    problem: str | None = None  # why the file could not be used, for the recovery report


def read_state(directory: str) -> PartitionState:
    """Read ``partition.state``; never raises for a missing or damaged file (reports it)."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read(4096)
    except FileNotFoundError:
        return PartitionState(None, False, None)
    except (OSError, UnicodeDecodeError) as exc:
        return PartitionState(None, False, f"cannot read {path}: {exc}")
    fields = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
    try:
        if fields.get("version") != _STATE_VERSION:
            raise ValueError(f"version {fields.get('version')!r}")
        return PartitionState(int(fields["log_start_offset"]), fields["clean_shutdown"] == "1")
    except (KeyError, ValueError) as exc:
        return PartitionState(None, False, f"{path} is damaged ({exc}); ignoring it")


def log_start_on_disk(directory: str) -> int | None:
    """The log start a partition directory records, as an open reads it: ``partition.state``'s,
    or the first segment's base offset where the file is absent (a new partition writes
    none); None with neither (tools and tests look at a log that is not theirs)."""
    saved = read_state(directory).log_start_offset
    if saved is not None:
        return saved
    bases = list_segment_bases(directory)
    return bases[0] if bases else None


def write_state(directory: str, *, log_start_offset: int, clean_shutdown: bool) -> None:
    """Replace ``partition.state`` atomically and durably. Raises OSError (e.g. ENOSPC)."""
    replace_durably(os.path.join(directory, STATE_FILE),
                    f"version={_STATE_VERSION}\nlog_start_offset={log_start_offset}\n"
                    f"clean_shutdown={int(clean_shutdown)}\n")


def replace_durably(path: str, text: str) -> None:
    """Replace a small text file so that a crash leaves either the old or the new one whole:
    write a temporary file, fsync it, rename it over `path`, fsync the directory. The
    checkpoints (partition state, leader epochs, high watermarks) all go this way. Raises
    OSError (e.g. ENOSPC). Inside `durable_together()` the temporary file is written here
    and the fsyncs and the rename wait for the scope's end, shared by every file."""
    tmp = path + ".tmp"
    together = durable_together.pending()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("ascii"))
        if together is None:
            os.fsync(fd)
    finally:
        os.close(fd)
    if together is not None:
        together[path] = text
        return
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path) or ".")
