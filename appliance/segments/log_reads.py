"""The read side of a PartitionLog: byte ranges for sendfile, lookups by timestamp, headers.

These functions are :class:`~appliance.segments.log.PartitionLog` methods kept in a module of
their own; they read its state (offsets, segment list) and never change it, except that a
lookup which meets a bad index entry rebuilds that segment's indexes (derived data) and retries
once. Nothing here copies payload bytes into Python: a read answers ``(fd, position,
length)`` after reading batch *headers* only. Writer thread only (see ``log.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import NamedTuple

from klog.protocol.record_batch import BatchHeader

from . import lookup
from .errors import LogClosedError, OffsetOutOfRangeError, storage_errors
from .segment import LogSegment
from .segment_repair import rebuild_indexes

log = logging.getLogger("klog.segments")


class ReadSlice(NamedTuple):
    """Whole batches at ``[position, position + length)`` of the file open as ``fd``; hand it
    to ``os.sendfile``. The fd stays valid until the log closes (deleted segments linger for
    ``file.delete.delay.ms``). Falsy when empty."""

    fd: int
    position: int
    length: int
    first_offset: int  # base offset of the first batch (may be below the offset asked for)
    segment_base_offset: int
    path: str  # the segment file, for callers that open their own descriptor

    def __bool__(self) -> bool:
        return self.length > 0

    def read(self) -> bytes:
        """Copy the bytes (tests and tools only; Fetch uses sendfile). b"" when empty."""
        return os.pread(self.fd, self.length, self.position) if self.length else b""


EMPTY_SLICE = ReadSlice(-1, 0, 0, -1, -1, "")


class BatchPosition(NamedTuple):
    segment_base_offset: int
    position: int


def read(plog, offset: int, max_bytes: int, end_offset: int | None = None) -> ReadSlice:
    """See :meth:`PartitionLog.read`; ``end_offset`` replaces the high watermark as the
    bound (a follower's read, :meth:`PartitionLog.read_replica`)."""
    check_range(plog, offset)
    high_watermark = plog.high_watermark if end_offset is None else end_offset
    if offset >= high_watermark:
        return EMPTY_SLICE
    for segment in plog.segments.starting_at(offset):
        found = lookup_or_rebuild(lookup.translate_offset, segment, offset)
        if found is not None:
            break
    else:
        return EMPTY_SLICE
    position, header = found
    if header.base_offset >= high_watermark:
        return EMPTY_SLICE
    end = position + header.size  # at least one whole batch, however large (KIP-74)
    max_position = _high_watermark_position(segment, high_watermark)
    limit = min(max_position, position + max_bytes)
    if limit > end:
        end = lookup_or_rebuild(lookup.batch_end, segment, position, limit, max_position)
    return ReadSlice(segment.fd, position, end - position, header.base_offset,
                     segment.base_offset, segment.path)


def check_range(plog, offset: int) -> None:
    if plog.closed:
        raise LogClosedError(plog.directory)
    if not plog.log_start_offset <= offset <= plog.log_end_offset:
        raise OffsetOutOfRangeError(path=plog.directory, offset=offset,
                                    log_start_offset=plog.log_start_offset,
                                    log_end_offset=plog.log_end_offset)


def _high_watermark_position(segment: LogSegment, high_watermark: int) -> int:
    """Where reading must stop in ``segment``: its end, or the batch at the high watermark."""
    if high_watermark >= segment.next_offset:
        return segment.size
    found = lookup_or_rebuild(lookup.translate_offset, segment, high_watermark)
    return segment.size if found is None else found[0]


def lookup_or_rebuild(function, segment: LogSegment, *args):
    """Run a lookup; on a bad index entry rebuild the segment's indexes and retry once."""
    try:
        return function(segment, *args)
    except lookup.IndexMismatchError as exc:
        with storage_errors(segment.path, "rebuild the indexes of"):
            report = rebuild_indexes(segment)
        log.log(logging.ERROR if report.problem else logging.WARNING, "%s; %s", exc, report)
        return function(segment, *args)


def offset_for_timestamp(plog, timestamp_ms: int) -> tuple[int, int] | None:
    """See :meth:`PartitionLog.offset_for_timestamp`."""
    if plog.closed:
        raise LogClosedError(plog.directory)
    start = plog.log_start_offset
    for segment in plog.segments:
        if segment.next_offset <= start or segment.max_timestamp < timestamp_ms:
            continue
        found = lookup_or_rebuild(lookup.find_by_timestamp, segment, timestamp_ms, start)
        if found is None:
            continue
        position, header = found
        if header.base_offset >= plog.high_watermark:
            return None
        offset, timestamp = lookup.refine_in_batch(segment, position, header, timestamp_ms)
        return max(offset, start), timestamp
    return None


def iter_batch_headers(plog, start: int) -> Iterator[tuple[BatchPosition, BatchHeader]]:
    """See :meth:`PartitionLog.iter_batch_headers`."""
    for segment in plog.segments:
        if segment.next_offset <= start or not segment.size:
            continue
        found = lookup_or_rebuild(lookup.translate_offset, segment, start)
        if found is not None:
            for position, header in segment.headers(found[0], segment.size):
                yield BatchPosition(segment.base_offset, position), header


def offset_of_max_timestamp(plog, end_offset: int) -> tuple[int, int] | None:
    """See :meth:`PartitionLog.offset_of_max_timestamp`."""
    if plog.closed:
        raise LogClosedError(plog.directory)
    start = plog.log_start_offset
    live = [s for s in plog.segments
            if s.size and s.next_offset > start and s.base_offset < end_offset]
    if not live:
        return None
    # the segment holding the largest timestamp (its own max, kept in memory) usually holds
    # it below end_offset; only when its batch lies past end_offset (not yet replicated, not
    # yet stable) are the other segments' headers read too
    best = max(live, key=lambda s: s.max_timestamp)
    found = _max_batch([best], start, end_offset)
    if found is None or found[2].max_timestamp < best.max_timestamp:
        found = _max_batch(live, start, end_offset)
    if found is None:
        return None
    segment, position, header = found
    offset, timestamp = lookup.refine_in_batch(segment, position, header, header.max_timestamp)
    return max(offset, start), timestamp


def _max_batch(segments, start: int, end_offset: int):
    """(segment, position, header) of the first batch with the largest max_timestamp among
    the whole batches in [start, end_offset) of ``segments``, or None."""
    found = None
    for segment in segments:
        for position, header in segment.headers(0, segment.size):
            if header.last_offset < start:
                continue
            if header.last_offset >= end_offset:
                break
            if found is None or header.max_timestamp > found[2].max_timestamp:
                found = (segment, position, header)
    return found
