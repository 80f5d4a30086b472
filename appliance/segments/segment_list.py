"""The ordered segments of one log, and the deleted ones still held open for readers.

What it owns: the list of live segments (oldest first; the last one is the active segment), a
parallel list of base offsets for ``bisect``, and the *retired* segments: renamed to
``*.deleted`` by retention or truncation, but kept open for ``file.delete.delay.ms`` so a
``ReadSlice`` already handed to ``sendfile`` stays valid (Kafka's asynchronous delete).

The log's size is asked after every append (each publication to the shm region carries it),
so it is kept as the bytes of the sealed segments, counted again whenever the list changes,
plus the active segment's live size: a partition of thousands of segments once paid a sum
over all of them per append (23 us at 1,000 segments, 75 at 3,000). A sealed segment's size
changes only together with the list (a truncation retires what follows it first, and the
cleaner's segment is recovered before its swap).

Concurrency: the log's writer thread mutates; the group commit thread only calls
:meth:`unflushed` (a snapshot: copying a list is atomic under the GIL) and closes nothing.
Descriptors are closed only under :attr:`lock`, which ``PartitionLog.flush_through`` holds
while it fsyncs, so a descriptor is never closed under an fdatasync (nor reused by another
file in between). Adding and unlisting segments does not take the lock: a roll must not wait
for an fsync.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator

from .errors import storage_errors
from .segment import LogSegment


class SegmentList:
    def __init__(self, segments: list[LogSegment], directory: str):
        self.directory = directory
        self.lock = threading.Lock()
        self._segments = list(segments)
        self._bases = [s.base_offset for s in segments]
        self._retired: list[tuple[int, LogSegment]] = []  # (close after ms, segment)
        self._sealed_bytes = 0  # the sizes of every segment but the active one
        self._count_sealed()

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments))

    def __getitem__(self, index):
        return self._segments[index]

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._bases

    def index_of(self, offset: int) -> int:
        """Index of the segment whose base offset is the largest at or below ``offset`` (0 when
        ``offset`` precedes every segment)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def starting_at(self, offset: int) -> list[LogSegment]:
        """The segment that may hold ``offset`` and every later one."""
        return self._segments[self.index_of(offset) :]

    def size_bytes(self) -> int:
        segments = self._segments
        return self._sealed_bytes + segments[-1].size if segments else 0

    def _count_sealed(self) -> None:
        self._sealed_bytes = sum(s.size for s in self._segments[:-1])

    def unflushed(self, recovery_point: int) -> list[LogSegment]:
        """Segments holding offsets at or after ``recovery_point`` (call under :attr:`lock`)."""
        return [s for s in list(self._segments) if s.next_offset > recovery_point and s.size]

    def add(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._count_sealed()

    def retire(self, doomed: list[LogSegment], close_after_ms: int) -> None:
        """Unlist ``doomed`` and rename their files to ``*.deleted``; they are closed and
        removed by :meth:`close_due` once ``close_after_ms`` has passed. Raises StorageError."""
        for segment in doomed:
            i = self._segments.index(segment)
            del self._segments[i], self._bases[i]
        self._count_sealed()
        with storage_errors(self.directory, "rename deleted segments in"):
            for segment in doomed:
                segment.rename_for_deletion()
                self._retired.append((close_after_ms, segment))

    def replace(self, group: list[LogSegment], cleaned: LogSegment, close_after_ms: int) -> None:
        """The log cleaner's swap (cleaning_swap.py): ``cleaned`` takes the place of the
        consecutive ``group``, whose first segment's names it already has; the others are
        renamed ``*.deleted``. All are retired like retention's (closed after the delay, so a
        ReadSlice in flight stays valid). Raises StorageError."""
        i = self._segments.index(group[0])
        self._segments[i : i + len(group)] = [cleaned]
        self._bases[i : i + len(group)] = [cleaned.base_offset]
        self._count_sealed()
        group[0].replaced()
        self._retired.append((close_after_ms, group[0]))
        with storage_errors(self.directory, "rename cleaned-away segments in"):
            for segment in group[1:]:
                segment.rename_for_deletion()
                self._retired.append((close_after_ms, segment))

    def close_due(self, now_ms: int) -> None:
        """Close and remove retired segments whose delay has passed."""
        due = [s for t, s in self._retired if t <= now_ms]
        if due:
            self._retired = [(t, s) for t, s in self._retired if t > now_ms]
            with self.lock:
                for segment in due:
                    segment.close()
                    segment.remove_files()

    def close_all(self) -> None:
        """Close every segment; remove the retired ones now (their readers are gone too)."""
        with self.lock:
            for segment in self._segments + [s for _, s in self._retired]:
                segment.close()
            for _, segment in self._retired:
                segment.remove_files()
            self._retired = []

    def all_including_retired(self) -> list[LogSegment]:
        return self._segments + [s for _, s in self._retired]
