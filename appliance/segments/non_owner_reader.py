"""PartitionReader: serve a partition's Fetch from a process that does not own the log.

In the appliance one worker owns (writes) a partition; any worker may read it. A reader holds
no log state of its own: each call receives the numbers the owner last published (log start,
high watermark, log end, active segment base offset and valid bytes: a
:class:`~appliance.segments.log.LogSnapshot`, read from the shared-memory region by the caller)
and answers from the segment files of ``<log dir>/<topic>-<partition>/`` exactly what the
owner's :meth:`PartitionLog.read` would have answered with the same numbers: the same
``(position, length)`` in the same segment, over the same bytes. It runs the owner's own lookups
(``lookup.py``) over read-only views of the files (``read_only_segment.py``).

Rules that keep it right while the owner keeps writing:

- **Nothing past the published numbers**: the active segment is read up to ``active_bytes``
  only, never up to its file size (an append in flight lies beyond); index entries beyond
  those bytes or the published offsets are ignored; reads stop at the high watermark.
- **The segment list follows the owner lazily**: the directory is listed again when the
  published active segment changes (a roll, a truncation into an older segment), when the high
  watermark goes down (a truncation), and when a needed segment cannot be opened (retention).
  A refresh also notices a file replaced under the same name (its inode changed).
- **The cleaner's swaps** (``cleaning_swap.py``) replace a segment's file under the same
  name (noticed by inode on a refresh; the old descriptor reads the old, equally valid
  records meanwhile) and remove the later segments of its group: a segment that vanished
  while the offset is still above the first listed base is looked up again in the new list.
- **Descriptors outlive deletion**: one O_RDONLY descriptor per segment read (plus one per
  index searched), cached for the ``max_open_segments`` most recently used. When the owner
  deletes a segment (renamed ``*.deleted``, removed later) an open descriptor still reads the
  same bytes; the reader closes it ``retire_delay_ms`` after noticing the segment is gone (or
  after evicting it from the cache), so a ReadSlice handed to ``sendfile`` meanwhile stays
  valid (as the owner's do for ``file.delete.delay.ms``). A segment needed but already gone is
  OffsetOutOfRangeError: the client's offset fell below the log start while it was asking.
- **A hint skips the index**: ``hint=(segment_base_offset, position)``, the largest published
  index entry at or below the offset (the shm region's ring of the active segment's newest
  entries), starts the header scan there. A hint that does not land on a plausible batch at or
  below the offset is ignored.

Not covered: a reader that misses a whole truncate-then-regrow sequence between two calls (the
high watermark back above where it was and the active segment based where it was) keeps
descriptors of replaced files until :meth:`refresh`; truncation exists for replication only.

Concurrency: one thread (the worker's event loop). What can fail: OffsetOutOfRangeError,
LogClosedError after :meth:`close`, CorruptRecordError (a damaged header inside published
data), OSError.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import lookup
from .errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError
from .layout import list_segment_bases
from .log_reads import EMPTY_SLICE, ReadSlice
from .read_only_segment import ReadOnlySegment

Hint = tuple[int, int]  # (segment base offset, byte position of a batch at or below the offset)


@dataclass
class ReaderStatistics:
    reads: int = 0
    hinted: int = 0  # reads whose batch was found from the hint, without the index
    index_lookups: int = 0  # reads that searched an index file (pread)
    index_mismatches: int = 0  # index entries that failed their check: looked up without index
    refreshes: int = 0  # directory listings
    open_segments: int = 0
    retired_segments: int = 0  # gone from the directory, descriptor kept for in-flight slices


class PartitionReader:
    """Read-only access to one partition directory; see the module docstring. Use as a context
    manager or call :meth:`close`."""

    def __init__(self, directory: str, *, retire_delay_ms: int = 60_000,
                 max_open_segments: int = 32, clock: Callable[[], float] = time.monotonic):
        self.directory = directory
        self._max_open = max(2, max_open_segments)
        self._retire_delay_s = retire_delay_ms / 1000
        self._clock = clock
        self._bases: list[int] = []
        self._segments: dict[int, ReadOnlySegment] = {}
        self._retired: list[tuple[float, ReadOnlySegment]] = []  # (close at, segment)
        self._active_base: int | None = None
        self._last_high_watermark = -1
        self._stats = ReaderStatistics()
        self._closed = False
        # when a read of it last left by sendfile (set by its user): one closing it sooner
        # than the grace could pull the descriptor from under the send
        self.region_at: float | None = None

    # -- reading ----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, log_start_offset: int, high_watermark: int,
             active_base_offset: int, active_bytes: int, log_end_offset: int | None = None,
             hint: Hint | None = None, last_stable_offset: int | None = None) -> ReadSlice:
        """What the owner's ``read(offset, max_bytes)`` answers with these numbers: whole
        batches from the one holding ``offset``, in one segment, up to ``max_bytes`` but at
        least one batch, never past the high watermark (``last_stable_offset`` when given: a
        read_committed read) nor ``active_bytes``; empty there. Raises OffsetOutOfRangeError
        outside [log start, log end] (the log end defaults to the high watermark), or when
        the segment was deleted meanwhile."""
        self._begin(offset, log_start_offset, high_watermark, log_end_offset, active_base_offset)
        if last_stable_offset is not None and last_stable_offset < high_watermark:
            high_watermark = last_stable_offset
        self._stats.reads += 1
        if offset >= high_watermark:
            return EMPTY_SLICE
        for _ in range(_RELIST_ATTEMPTS):
            try:
                segment, found = self._find(offset, active_base_offset, active_bytes,
                                            high_watermark, log_end_offset, log_start_offset,
                                            hint)
                break
            except _Relisted:
                continue
        else:
            self._gone(offset, log_start_offset, high_watermark, log_end_offset)
        if found is None:
            if not self._listed(active_base_offset):
                self._gone(offset, log_start_offset, high_watermark, log_end_offset)
            return EMPTY_SLICE
        position, header = found
        if header.base_offset >= high_watermark:
            return EMPTY_SLICE
        end = position + header.size  # at least one whole batch, however large (KIP-74)
        max_position = self._high_watermark_position(segment, high_watermark)
        limit = min(max_position, position + max_bytes)
        if limit > end:
            end = self._with_index(lookup.batch_end, segment, position, limit, max_position)
        return ReadSlice(segment.fd, position, end - position, header.base_offset,
                         segment.base_offset, segment.path)

    def _find(self, offset, active_base_offset, active_bytes, high_watermark, log_end_offset,
              log_start_offset, hint):
        """(segment, (position, header)) of the batch holding ``offset``, or (None, None).
        Raises _Relisted when a segment vanished but the offset is still in the directory's
        list (the cleaner merged it into an earlier one): look again."""
        for segment in self._segments_from(offset, active_base_offset, active_bytes,
                                           high_watermark, log_end_offset,
                                           log_start_offset):
            found = self._translate(segment, offset, hint)
            if found is not None:
                return segment, found
        return None, None

    def offset_for_timestamp(self, timestamp_ms: int, *, log_start_offset: int,
                             high_watermark: int, active_base_offset: int, active_bytes: int,
                             log_end_offset: int | None = None) -> tuple[int, int] | None:
        """What the owner's ``offset_for_timestamp`` answers with these numbers: (offset,
        timestamp) of the first record with timestamp >= ``timestamp_ms`` below the high
        watermark, or None. One pread per sealed segment (its final time index entry, then
        cached), then the time and offset index searches of one segment."""
        self._begin(log_start_offset, log_start_offset, high_watermark, log_end_offset,
                    active_base_offset)
        start = log_start_offset
        for segment in self._segments_from(start, active_base_offset, active_bytes,
                                           high_watermark, log_end_offset, start,
                                           skip_missing=True):
            if segment.end_offset <= start or self._max_timestamp(segment) < timestamp_ms:
                continue
            found = self._with_index(lookup.find_by_timestamp, segment, timestamp_ms, start)
            if found is None:
                continue
            position, header = found
            if header.base_offset >= high_watermark:
                return None
            offset, timestamp = lookup.refine_in_batch(segment, position, header, timestamp_ms)
            return max(offset, start), timestamp
        return None

    # -- the segment list -------------------------------------------------------------------

    def refresh(self) -> None:
        """List the directory again; retire the descriptors of segments that are gone or whose
        file was replaced; re-read the sizes of the others."""
        try:
            bases = list_segment_bases(self.directory)
        except FileNotFoundError:  # the partition was deleted
            bases = []
        listed = set(bases)
        for base, segment in list(self._segments.items()):
            try:
                stat = os.stat(segment.path) if base in listed else None
            except FileNotFoundError:
                stat = None
            if stat is None or (stat.st_dev, stat.st_ino) != segment.inode:
                self._retire(base)
            else:
                segment.file_size = stat.st_size
                segment.sealed_max_timestamp = None
        self._bases = bases
        self._stats.refreshes += 1
        self._close_due()

    def _begin(self, offset, log_start_offset, high_watermark, log_end_offset,
               active_base_offset) -> None:
        if self._closed:
            raise LogClosedError(self.directory)
        end = high_watermark if log_end_offset is None else log_end_offset
        if not log_start_offset <= offset <= end:
            raise OffsetOutOfRangeError(path=self.directory, offset=offset,
                                        log_start_offset=log_start_offset, log_end_offset=end)
        if (active_base_offset != self._active_base
                or high_watermark < self._last_high_watermark
                or not self._listed(active_base_offset)):
            self.refresh()
            self._active_base = active_base_offset
        self._last_high_watermark = high_watermark
        if self._retired and self._retired[0][0] <= self._clock():
            self._close_due()

    def _listed(self, base: int) -> bool:
        i = bisect.bisect_left(self._bases, base)
        return i < len(self._bases) and self._bases[i] == base

    def _segments_from(self, offset, active_base, active_bytes, high_watermark, log_end_offset,
                       log_start_offset, *, skip_missing=False):
        """The segment that may hold ``offset`` and every later one up to the published active
        segment, each bounded by the published numbers."""
        bases = self._bases[: bisect.bisect_right(self._bases, active_base)]
        if not skip_missing and (not bases or offset < bases[0]):
            self._gone(offset, log_start_offset, high_watermark, log_end_offset)
        first = max(bisect.bisect_right(bases, offset) - 1, 0)
        for i in range(first, len(bases)):
            base = bases[i]
            segment = self._segment(base)
            if segment is None and skip_missing:
                continue
            if segment is None:
                if self._bases and self._bases[0] <= offset:
                    raise _Relisted  # merged into an earlier segment by the cleaner
                self._gone(offset, log_start_offset, high_watermark, log_end_offset)
            if base == active_base:
                end_offset = high_watermark if log_end_offset is None else log_end_offset
                segment.bound(active_bytes, end_offset)
                segment.active, segment.end_offset = True, end_offset
            else:  # a missing active segment (stale numbers) bounds the last one listed
                next_base = bases[i + 1] if i + 1 < len(bases) else active_base
                segment.bound(segment.file_size, next_base)
                segment.active, segment.end_offset = False, next_base
            yield segment

    def _gone(self, offset, log_start_offset, high_watermark, log_end_offset):
        """The segment holding ``offset`` was deleted after the numbers were published: the
        log start has moved past it."""
        raise OffsetOutOfRangeError(
            path=f"{self.directory} (the segment holding it was deleted meanwhile)",
            offset=offset, log_start_offset=log_start_offset,
            log_end_offset=high_watermark if log_end_offset is None else log_end_offset)

    def _segment(self, base: int) -> ReadOnlySegment | None:
        """The open segment, opened now if needed; None when its file is gone (after one
        refresh, which may show that it was replaced)."""
        segment = self._segments.pop(base, None)
        if segment is not None:
            self._segments[base] = segment  # the most recently used last
            if not self._replaced(segment):
                return segment
            self.refresh()  # the cleaner swapped a new file in under this name
            if base in self._segments:
                return self._segments[base]
        for attempt in range(2):
            try:
                segment = ReadOnlySegment(self.directory, base)
            except FileNotFoundError:
                if attempt == 0:
                    self.refresh()
                continue
            segment.checked_at = self._clock()
            self._segments[base] = segment
            if len(self._segments) > self._max_open:
                self._retire(next(b for b in self._segments if b != self._active_base))
            return segment
        return None

    def _replaced(self, segment: ReadOnlySegment) -> bool:
        """Whether a sealed segment's name now holds another file (a cleaner's swap), checked
        at most every REVALIDATE_S per segment: a reader serves the old, valid records that
        long at most, and lets the old file go soon after."""
        now = self._clock()
        if segment.base_offset == self._active_base or now < segment.checked_at + REVALIDATE_S:
            return False
        segment.checked_at = now
        try:
            stat = os.stat(segment.path)
        except FileNotFoundError:
            return True
        return (stat.st_dev, stat.st_ino) != segment.inode

    def _retire(self, base: int) -> None:
        segment = self._segments.pop(base)
        self._retired.append((self._clock() + self._retire_delay_s, segment))

    def _close_due(self) -> None:
        now = self._clock()
        due = [s for t, s in self._retired if t <= now]
        if due:
            self._retired = [(t, s) for t, s in self._retired if t > now]
            for segment in due:
                segment.close()

    # -- lookups ----------------------------------------------------------------------------

    def _translate(self, segment: ReadOnlySegment, offset: int, hint: Hint | None):
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        if hint is not None and hint[0] == segment.base_offset and 0 <= hint[1] < segment.size:
            found = _scan_from_hint(segment, offset, hint[1])
            if found is not _BAD_HINT:
                self._stats.hinted += 1
                return found
        self._stats.index_lookups += 1
        return self._with_index(lookup.translate_offset, segment, offset)

    def _high_watermark_position(self, segment: ReadOnlySegment, high_watermark: int) -> int:
        """Where reading must stop in ``segment``: its bound, or the batch at the high
        watermark (the owner's ``reads._high_watermark_position``)."""
        if high_watermark >= segment.end_offset:
            return segment.size
        found = self._with_index(lookup.translate_offset, segment, high_watermark)
        return segment.size if found is None else found[0]

    def _with_index(self, function, segment: ReadOnlySegment, *args):
        """Run a lookup; if an index entry fails its check (the owner may be rewriting the
        index), run it again without the index."""
        try:
            return function(segment, *args)
        except lookup.IndexMismatchError:
            self._stats.index_mismatches += 1
            return function(segment.without_index(), *args)

    def _max_timestamp(self, segment: ReadOnlySegment) -> int:
        """A sealed segment's final time index entry (cached); for the active one, the last
        published entry and the batches after the last published offset index entry."""
        if not segment.active and segment.sealed_max_timestamp is not None:
            return segment.sealed_max_timestamp
        last = segment.time_index.last_entry()
        max_timestamp = -1 if last is None else last[0]
        if segment.active:
            entry = segment.index.last_entry_raw()
            for _, header in segment.headers(0 if entry is None else entry[1], segment.size):
                max_timestamp = max(max_timestamp, header.max_timestamp)
        else:
            segment.sealed_max_timestamp = max_timestamp
        return max_timestamp

    # -- the rest ---------------------------------------------------------------------------

    def statistics(self) -> ReaderStatistics:
        stats = ReaderStatistics(**vars(self._stats))
        stats.open_segments, stats.retired_segments = len(self._segments), len(self._retired)
        return stats

    def close(self) -> None:
        """Close every descriptor, retired or not. ReadSlices handed out become invalid.
        Idempotent."""
        self._closed = True
        for segment in list(self._segments.values()) + [s for _, s in self._retired]:
            segment.close()
        self._segments, self._retired = {}, []

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<PartitionReader {self.directory} {len(self._segments)} open, "
                f"{len(self._retired)} retired>")


_BAD_HINT = object()
REVALIDATE_S = 1.0  # how often a cached sealed segment's name is checked against its file
_RELIST_ATTEMPTS = 3


class _Relisted(Exception):  # noqa: N818 - a signal inside the reader, never raised out
    """A segment listed before is gone while the offset it held is still in the log."""


def _scan_from_hint(segment: ReadOnlySegment, offset: int, start: int):
    """``lookup.translate_offset`` from a hinted position; _BAD_HINT when the position does not
    hold a batch at or below ``offset`` (a stale hint: use the index)."""
    try:
        for position, header in segment.headers(start, segment.size):
            if position == start and not segment.base_offset <= header.base_offset <= offset:
                return _BAD_HINT
            if header.last_offset >= offset:
                return position, header
    except CorruptRecordError:
        return _BAD_HINT
    return None
