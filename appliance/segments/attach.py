"""Re-attaching a restarted worker to a partition: open on the numbers the dead worker published.

When a worker is killed and the machine stays up, the page cache still holds every byte the
worker wrote, and the shared-memory region still holds what it published after its last append:
the log end offset, the active segment's base offset and that segment's valid bytes (an
:class:`AttachPoint`). Every byte below those numbers was whole when they were published, so
they are a better starting point than anything recovery can infer from the files:

- **sealed segments are trusted**: their three files must exist, their indexes be trimmed and in
  bounds, and the batches after the last index entry must end exactly at the end of the file,
  with the next segment's base offset as their next offset (a few header reads per segment; no
  CRC, no per-entry index check, no rebuild);
- **the active segment is trusted up to** ``active_bytes``: the batches after its last index
  entry below that point must chain exactly to ``active_bytes`` and to ``log_end_offset``;
- **only what follows** ``active_bytes`` **is validated** (an append in flight when the worker
  died): whole valid batches are kept, a torn tail is cut, and index entries at or beyond the
  published point are dropped first (the scan re-adds those of the batches it keeps);
- **a roll in flight** is recognised: one more segment, based at ``log_end_offset``, after the
  published active one. The old one is then sealed at ``active_bytes`` and the new one, which
  holds only unpublished data, is validated whole.

Anything that disagrees (a missing file, ``active_bytes`` beyond the end of the file or not at a
batch boundary, a batch chain that does not reach ``log_end_offset``, an index out of bounds,
segments after the active one that no roll explains) raises :class:`AttachRefused` naming the
numbers, after closing what was opened; the loader then runs the normal recovery and reports
why. Every check reads (headers with pread, indexes through read-only maps or pread); nothing
is written before all of them have passed, so a refused attach leaves the files as they were.

Durability: nothing here is fdatasync'd. The log opens with its recovery point at its log start
offset, so its first flush syncs every segment; what the dead worker left unsynced in the page
cache is made durable then, not during the open (the normal unclean recovery syncs it here).

What can fail: OSError (the log wraps it in StorageError). Bad data never raises: it refuses.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .config import INT32_MAX, LogConfig
from .errors import CorruptRecordError
from .layout import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from .read_only_segment import PreadOffsetIndex
from .recovery_scan import RecoveryReport, SegmentRecovery
from .segment import LogSegment
from .segment_repair import (
    recover_segment,
    restore_max_timestamp,
    restore_rolling_base,
    validate_from,
)


class AttachPoint(NamedTuple):
    """What the owner published after its last append (the shm region's partition entry)."""

    log_end_offset: int
    active_base_offset: int
    active_bytes: int  # valid bytes in the active segment: a batch boundary


class AttachRefused(Exception):
    """The files disagree with the attach point; the message names both sides."""


def attach_segments(directory: str, config: LogConfig, point: AttachPoint, bases: list[int], *,
                    now_ms: int, report: RecoveryReport) -> list[LogSegment]:
    """Open the segments of ``bases`` (ascending, leftovers already removed) on ``point``;
    fill ``report``. Raises AttachRefused (nothing opened stays open), OSError."""
    later = _check_point(directory, point, bases)
    segments: list[LogSegment] = []
    try:
        for base, next_base in zip(bases, bases[1:], strict=False):
            if base == point.active_base_offset:
                break
            segments.append(LogSegment(directory, base, config, now_ms=now_ms))
            _check_sealed(segments[-1], next_base)
        segments.append(LogSegment(directory, point.active_base_offset, config, now_ms=now_ms))
        _check_active(segments[-1], point, rolled=later is not None)
        if later is not None:
            segments.append(LogSegment(directory, later, config, now_ms=now_ms))
        _apply(segments, point, later is not None, report, now_ms)
        for segment in segments:
            segment.drop_index_pages()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    report.attached, report.attach_offset = True, point.log_end_offset
    return segments


def _check_point(directory: str, point: AttachPoint, bases: list[int]) -> int | None:
    """The numbers against the directory listing; returns the base of a segment created by a
    roll in flight, or None."""
    end, active, size = point
    if not bases:
        raise AttachRefused("the directory holds no segment")
    if active not in bases:
        raise AttachRefused(f"the active segment {active} published is missing (segments "
                            f"{bases[0]}..{bases[-1]})")
    if not 0 <= size <= INT32_MAX or end < active or (size == 0) != (end == active):
        raise AttachRefused(f"inconsistent attach point: log end {end}, active segment "
                            f"{active}, {size} bytes")
    later = bases[bases.index(active) + 1 :]
    if later and (len(later) > 1 or later[0] != end):
        raise AttachRefused(f"segments {later} follow the published active segment {active}; "
                            f"a roll in flight explains one, based at the log end {end}")
    for base in bases:
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            if base not in later and not os.path.exists(segment_path(directory, base, suffix)):
                raise AttachRefused(f"{segment_path(directory, base, suffix)} is missing")
    return later[0] if later else None


def _check_sealed(segment: LogSegment, next_base: int) -> None:
    """A sealed segment: trimmed indexes in bounds, batches ending at the file's end (an
    empty one is a segment the log cleaner emptied: its offsets all went)."""
    size = segment.file_size
    max_relative = next_base - 1 - segment.base_offset
    for index in (segment.index, segment.time_index):
        declared = index.load(active=False, max_relative_offset=max_relative,
                              max_position=size, trusted=True)
        if index.damaged or index.entries < declared:
            raise AttachRefused(f"{index.path}: {declared} entries, {index.entries} within "
                                f"offset {next_base - 1} and position {size}, or not trimmed")
    entries = segment.index.entries
    last = segment.index.entry_at(entries - 1) if entries else None
    restore_max_timestamp(segment)
    _check_chain(segment, last, size, next_base, "the end of the file", exact=False)


def _check_active(segment: LogSegment, point: AttachPoint, *, rolled: bool) -> None:
    """The published active segment: the file holds ``active_bytes`` and its batches chain to
    the log end there (checked read-only first); a rolled one has nothing after that point.
    Then its indexes are loaded for appends, minus the entries beyond the published point."""
    end, _, size = point
    file_size = segment.file_size
    if file_size < size:
        raise AttachRefused(f"{segment.path} holds {file_size} bytes, fewer than the "
                            f"{size} published")
    if rolled and file_size > size and any(segment.read_bytes(size, 64)):
        raise AttachRefused(f"{segment.path} has data after the {size} bytes published, yet "
                            f"the next segment {end} exists")
    probe = PreadOffsetIndex(segment.index.path, segment.base_offset)
    probe.max_position, probe.max_relative_offset = size, end - 1 - segment.base_offset
    try:
        last = probe.last_entry_raw()
    finally:
        probe.close()
    last = None if last is None else (segment.base_offset + last[0], last[1])
    found = _check_chain(segment, last, size, end, f"the {size} bytes published")
    for index in (segment.index, segment.time_index):
        index.load(active=True, max_relative_offset=end - 1 - segment.base_offset,
                   max_position=size, trusted=True)
    restore_max_timestamp(segment)
    if found[0] > segment.max_timestamp:
        segment.max_timestamp, segment.offset_of_max_timestamp = found


def _check_chain(segment: LogSegment, last_entry: tuple[int, int] | None, size: int,
                 end_offset: int, what: str, *, exact: bool = True) -> tuple[int, int]:
    """From the last index entry (offset, position), the batch headers must chain to byte
    ``size`` and offset ``end_offset``: exactly for the active segment; a sealed one
    (``exact=False``) may skip offsets and end below ``end_offset``, where the log cleaner
    removed records. Sets the segment's size, next offset and max timestamp (from those
    headers); returns that (max timestamp, offset)."""
    entry_offset, start = last_entry or (-1, 0)
    next_offset = segment.base_offset if start == 0 else None
    max_timestamp, offset_of_max = segment.max_timestamp, segment.offset_of_max_timestamp
    try:
        for position, header in segment.headers(start, size):
            if position == start and start and header.last_offset != entry_offset:
                raise AttachRefused(f"{segment.index.path}: entry ({entry_offset}, {start}) "
                                    f"points at a batch ending at {header.last_offset}")
            if next_offset is not None and (header.base_offset != next_offset if exact
                                            else header.base_offset < next_offset):
                raise AttachRefused(f"{segment.path}: batch at byte {position} has base offset "
                                    f"{header.base_offset}, expected {next_offset}")
            next_offset = header.next_offset
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
    except CorruptRecordError as exc:
        raise AttachRefused(f"{what} do not end at a batch boundary: {exc}") from exc
    if next_offset is not None and (next_offset != end_offset if exact
                                    else next_offset > end_offset):
        raise AttachRefused(f"{segment.path}: batches up to {what} end at offset "
                            f"{next_offset}, not {end_offset}")
    segment.size, segment.next_offset = size, end_offset
    segment.max_timestamp, segment.offset_of_max_timestamp = max_timestamp, offset_of_max
    return max_timestamp, offset_of_max


def _apply(segments: list[LogSegment], point: AttachPoint, rolled: bool,
           report: RecoveryReport, now_ms: int) -> None:
    """Every check passed: validate what follows the published end, cut a torn tail."""
    published = segments[-2] if rolled else segments[-1]
    for segment in segments:
        if segment is published:
            break
        report.segments.append(SegmentRecovery(segment.base_offset, segment.path,
                                               scanned_from=segment.size,
                                               trusted_bytes=segment.size))
    tail = SegmentRecovery(published.base_offset, published.path, trusted_bytes=point.active_bytes)
    report.segments.append(tail)
    if rolled:
        validate_from(published, tail, point.active_bytes, point.log_end_offset, active=False)
        published.seal_indexes()
        in_flight = segments[-1]
        report.segments.append(recover_segment(in_flight, mode="full", active=True,
                                               next_base=None))
    else:
        published.activate(min_capacity=published.file_size)
        validate_from(published, tail, point.active_bytes, point.log_end_offset, active=True)
    restore_rolling_base(segments[-1], now_ms)
