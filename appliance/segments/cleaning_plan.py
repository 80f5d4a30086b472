"""The log cleaner's decisions, as pure functions of a log's segments (Kafka's
LogCleanerManager.cleanableOffsets, LogCleaner.groupSegmentsBySize).

- **The cleanable range** runs from the first dirty offset (the cleaner checkpoint, within
  the log) to the first uncleanable one: the active segment's base (never cleaned), the first
  unstable offset (an open transaction: the cleaner never reads undecided data), and the base
  of the first segment holding a record younger than ``min.compaction.lag.ms``. klog cleans
  whole segments only: a segment reaching past that bound waits for the next run.
- **Whether to clean**: the dirty ratio (dirty bytes over all cleanable bytes) reaches
  ``min.cleanable.dirty.ratio``, or the oldest dirty segment is older than
  ``max.compaction.lag.ms``.
- **Groups**: consecutive segments whose sizes together fit in ``segment.bytes`` and whose
  index entries fit in one index become one cleaned segment (a compacted log does not keep
  as many files as it rolled).
"""

from __future__ import annotations

from typing import NamedTuple

from .config import INT32_MAX


class SegmentStats(NamedTuple):
    base_offset: int
    next_offset: int  # the next segment's base (the log end for the active one)
    size: int
    largest_timestamp_ms: int
    index_entries: int


class Cleanable(NamedTuple):
    first_dirty_offset: int
    end_offset: int  # the first uncleanable offset: whole segments below it are cleanable
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def first_dirty_offset(checkpoint: int | None, log_start: int, log_end: int) -> int:
    """Where the last run stopped, or the log start when that is unknown or outside the log
    (retention moved the start past it, a truncation the end below it: Kafka's reset)."""
    if checkpoint is None or not log_start <= checkpoint <= log_end:
        return log_start
    return checkpoint


def cleanable(segments: list[SegmentStats], *, first_dirty: int, first_unstable: int | None,
              now_ms: int, min_compaction_lag_ms: int) -> Cleanable:
    """The cleanable range of a log whose last segment is the active one."""
    end = segments[-1].base_offset
    if first_unstable is not None:
        end = min(end, first_unstable)
    if min_compaction_lag_ms > 0:
        young = now_ms - min_compaction_lag_ms
        for s in segments[:-1]:
            if s.next_offset > first_dirty and s.largest_timestamp_ms > young:
                end = min(end, s.base_offset)
                break
    whole = [s for s in segments[:-1] if s.next_offset <= end]
    clean = sum(s.size for s in whole if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in whole if s.next_offset > first_dirty)
    end = whole[-1].next_offset if whole else segments[0].base_offset
    return Cleanable(first_dirty, max(end, first_dirty) if dirty else first_dirty, clean, dirty)


def needs_cleaning(range_: Cleanable, segments: list[SegmentStats], *, now_ms: int,
                   min_cleanable_dirty_ratio: float, max_compaction_lag_ms: int) -> bool:
    """Kafka's choice: enough dirt, or dirt waiting longer than max.compaction.lag.ms."""
    if range_.dirty_bytes == 0:
        return False
    if range_.dirty_ratio >= min_cleanable_dirty_ratio:
        return True
    oldest_dirty = next((s for s in segments if s.next_offset > range_.first_dirty_offset), None)
    return (oldest_dirty is not None and oldest_dirty.largest_timestamp_ms > 0
            and oldest_dirty.largest_timestamp_ms < now_ms - max_compaction_lag_ms)


def group_by_size(segments: list[SegmentStats], *, max_bytes: int,
                  max_index_entries: int) -> list[list[SegmentStats]]:
    """Consecutive segments, grouped so that each group fits one segment and one index, and
    its offsets fit the index's 32-bit relative offsets."""
    groups: list[list[SegmentStats]] = []
    for s in segments:
        group = groups[-1] if groups else None
        if (group is not None and sum(g.size for g in group) + s.size <= max_bytes
                and sum(g.index_entries for g in group) + s.index_entries < max_index_entries
                and s.next_offset - 1 - group[0].base_offset <= INT32_MAX):
            group.append(s)
        else:
            groups.append([s])
    return groups
