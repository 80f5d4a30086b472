"""The aborted-transaction index of a segment: Kafka's ``<base offset>.txnindex``.

One entry per transaction aborted by a marker that landed in the segment, in marker order,
in Kafka's format (big-endian, 34 bytes): version int16 (0), producer id int64, first offset
int64, last offset int64 (the marker's), last stable offset int64 (the partition's LSO once
that marker was written). A read_committed Fetch answers the aborted transactions that overlap
what it returns from these files, so any worker can serve it (the owner writes them; other
workers read them, as they read the segments). The files are derived data: the owner rebuilds
them from the log (its control batches) when it opens a partition, so one missing, torn by a
crash, or left behind by a truncation is rewritten (`reconcile`).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from .layout import OFFSET_DIGITS, TXN_INDEX_SUFFIX, fsync_directory, segment_path

ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def path_of(directory: str, base_offset: int) -> str:
    return segment_path(directory, base_offset, TXN_INDEX_SUFFIX)


def append(directory: str, base_offset: int, entry: AbortedTxn) -> None:
    """Add `entry` to the index of the segment at `base_offset` (created when missing). Raises
    OSError. Not fsynced: recovery rebuilds the file from the log after a crash."""
    fd = os.open(path_of(directory, base_offset), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, ENTRY.pack(VERSION, *entry))
    finally:
        os.close(fd)


def read(directory: str, base_offset: int) -> list[AbortedTxn]:
    """The whole entries of one segment's index ([] when it has none); a torn last entry or
    an unknown version ends the list."""
    try:
        with open(path_of(directory, base_offset), "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return []
    entries = []
    for pos in range(0, len(data) - ENTRY_BYTES + 1, ENTRY_BYTES):
        version, *fields = ENTRY.unpack_from(data, pos)
        if version != VERSION:
            break
        entries.append(AbortedTxn(*fields))
    return entries


def indexed_bases(directory: str) -> list[int]:
    """Base offsets of the segments with a ``.txnindex`` file, ascending."""
    bases = []
    for name in os.listdir(directory):
        stem, dot, suffix = name.partition(".")
        if dot and suffix == "txnindex" and len(stem) == OFFSET_DIGITS and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def collect(directory: str, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """The aborted transactions that overlap [fetch_offset, upper_offset), oldest first
    (Kafka's collectAbortedTransactions): entries whose last offset is at or past the fetch
    offset and whose first offset is below the bound. Markers come after the data they end,
    so only the indexes of segments that may hold offsets >= fetch_offset are read."""
    found = []
    bases = indexed_bases(directory)
    for n, base in enumerate(bases):
        if n + 1 < len(bases) and bases[n + 1] <= fetch_offset:
            continue  # a later segment starts at or below the fetch: this one ends before it
        for entry in read(directory, base):
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_offset:
                found.append(entry)
            if entry.last_stable_offset > upper_offset:
                return found  # later aborts began past the bound
    return found


def reconcile(directory: str, live_bases: list[int],
              expected: dict[int, list[AbortedTxn]]) -> int:
    """Make the files say `expected` (segment base -> its aborted transactions, from the log):
    rewrite those that differ or are missing, remove those of segments with none or gone.
    Returns how many files changed. Raises OSError."""
    changed = 0
    live = set(live_bases)
    for base in indexed_bases(directory):
        if base not in live or not expected.get(base):
            os.unlink(path_of(directory, base))
            changed += 1
    for base, entries in expected.items():
        if not entries or base not in live:
            continue
        data = b"".join(ENTRY.pack(VERSION, *e) for e in entries)
        if _contents(path_of(directory, base)) == data:
            continue
        tmp = path_of(directory, base) + ".tmp"
        with open(tmp, "wb") as file:
            file.write(data)
        os.replace(tmp, path_of(directory, base))
        changed += 1
    if changed:
        fsync_directory(directory)
    return changed


def _contents(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
