"""Finding batches in a segment: by offset, by byte limit, by timestamp. O(log n) + a short scan.

Each lookup is a binary search in an mmap'd index (the largest entry <= the target) followed by
a scan of batch *headers* from that entry's position; entries are at most
``index.interval.bytes`` apart, so the scan reads a few headers. Payloads are never read.
The batch a segment appended last is the exception: an in-sync follower's and a tailing
consumer's fetch asks for exactly that one, and ``LogSegment.tail_batch`` answers it with one
header read (9 µs against 61 µs for the search and scan at Kafka's defaults, one small
record per batch: perf/bench_tail_read.py). So is the batch a read stopped before
(``LogSegment.batch_after_read``): a follower catching up asks next for exactly that one
(perf/bench_read_in_order.py).

An index entry is checked when it is used: the header at its position must be a batch whose
last offset is the entry's offset. If not, :class:`IndexMismatchError` is raised; the log
rebuilds that segment's indexes from its ``.log`` and retries once (an index is derived data).

The timestamp search is batch-granular (the engine keeps batches opaque);
:func:`refine_in_batch` narrows it to the exact record when ``klog.protocol.records`` offers
``first_offset_at_or_after``.
"""

from __future__ import annotations

from klog.protocol.record_batch import BatchHeader
from klog.protocol.records import first_offset_at_or_after

from .errors import CorruptRecordError
from .segment import LogSegment


class IndexMismatchError(Exception):
    """An index entry does not point at the batch it names; rebuild the segment's indexes."""

    def __init__(self, segment: LogSegment, offset: int, position: int, found: str):
        super().__init__(
            f"{segment.index.path}: entry ({offset}, {position}) points at {found}"
        )
        self.segment = segment


def _scan_from_entry(segment: LogSegment, entry_offset: int, start: int, end: int):
    """Headers from an index entry's position; verifies that the first one matches."""
    headers = segment.headers(start, end)
    if start == 0:
        yield from headers
        return
    try:
        first = next(headers, None)
    except CorruptRecordError as exc:
        raise IndexMismatchError(segment, entry_offset, start, str(exc)) from exc
    if first is None or first[1].last_offset != entry_offset:
        found = "the end of the segment" if first is None else f"last offset {first[1].last_offset}"
        raise IndexMismatchError(segment, entry_offset, start, found)
    yield first
    yield from headers


def translate_offset(segment: LogSegment, offset: int) -> tuple[int, BatchHeader] | None:
    """(position, header) of the first batch whose last offset is >= ``offset``, or None when
    the segment ends before it (Kafka's ``translateOffset``). The batch appended last, and the
    one the last read stopped before, are answered without the index."""
    found = segment.tail_batch(offset) or segment.batch_after_read(offset)
    if found is not None:
        return found
    entry_offset, start = segment.index.lookup(offset)
    for position, header in _scan_from_entry(segment, entry_offset, start, segment.size):
        if header.last_offset >= offset:
            return position, header
    return None


def batch_end(segment: LogSegment, start: int, limit: int, end: int) -> int:
    """The largest batch boundary in ``(start, limit]`` (``limit`` must be at least the end of
    the batch at ``start``); ``end`` bounds the scan (the segment size or the high watermark).
    When the scan stops at a batch that does not fit, the segment notes it
    (:meth:`LogSegment.note_read_end`): the next read in order starts there."""
    entry_offset, entry_position = segment.index.lookup_position(limit)
    if entry_position <= start or entry_position >= end:
        # no entry between: scan from the start. An entry at `end` names the batch there,
        # which the scan must not reach (a high watermark held for replication, whose batch
        # has an entry): it is no sign of a broken index.
        entry_offset, entry_position = -1, start
    boundary = entry_position
    scan = (segment.headers(start, end) if entry_offset < 0
            else _scan_from_entry(segment, entry_offset, entry_position, end))
    for position, header in scan:
        if position + header.size > limit:
            segment.note_read_end(position, header)
            break
        boundary = position + header.size
    return boundary


def find_by_timestamp(
    segment: LogSegment, timestamp_ms: int, min_offset: int
) -> tuple[int, BatchHeader] | None:
    """(position, header) of the first batch with max_timestamp >= ``timestamp_ms`` and last
    offset >= ``min_offset``, or None. The time index gives where the max timestamp was last
    below the target; the offset index turns that into a position."""
    _, offset = segment.time_index.lookup(timestamp_ms)
    entry_offset, start = segment.index.lookup(max(offset, min_offset))
    for position, header in _scan_from_entry(segment, entry_offset, start, segment.size):
        if header.max_timestamp >= timestamp_ms and header.last_offset >= min_offset:
            return position, header
    return None


def refine_in_batch(
    segment: LogSegment, position: int, header: BatchHeader, timestamp_ms: int
) -> tuple[int, int]:
    """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms`` in a batch
    whose max timestamp reaches it.

    LogAppendTime batches: every record's timestamp is the batch's max timestamp, so the first
    record is the answer. CreateTime: ask ``klog.protocol.records.first_offset_at_or_after``
    (it decodes, and decompresses, one batch read with ``pread``); if that fails, answer the
    batch's first record (offset, base timestamp): a consumer starting there sees
    at most one batch of earlier records, never misses one.
    """
    if header.log_append_time:
        return header.base_offset, header.max_timestamp
    fallback = (header.base_offset, header.base_timestamp)
    try:
        found = first_offset_at_or_after(segment.read_bytes(position, header.size), 0,
                                         timestamp_ms)
    except Exception:  # noqa: BLE001 - an unsupported codec or a decoding bug: stay coarse
        return fallback
    return tuple(found) if found is not None else fallback

