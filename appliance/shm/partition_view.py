"""What a reader gets from a partition slot: a consistent, immutable snapshot, and the lookup of
the hot offset index ring in it (pure: no shared memory is touched after the copy)."""

from __future__ import annotations

from typing import NamedTuple

from .layout import INDEX_ENTRY

_entry_unpack = INDEX_ENTRY.unpack_from
_ENTRY = INDEX_ENTRY.size
_new = tuple.__new__  # a NamedTuple's own __new__ costs ~0.4 us; this is the same tuple


class IndexPosition(NamedTuple):
    """Where to start reading for an offset: the active segment (its base offset names the
    .log file) and the byte position of the largest indexed batch at or before the offset."""

    base_offset: int
    position: int


class PartitionView(NamedTuple):
    """A consistent snapshot of one slot. Offsets are -1 until the owner first publishes."""

    slot: int
    topic: str
    partition: int
    owner: int
    epoch: int
    index_total: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    active_segment_base_offset: int
    active_segment_bytes: int
    size_bytes: int
    records_in: int
    bytes_in: int
    last_stable_offset: int  # the high watermark, or the first offset of an open transaction
    aborted_txns: int  # 0: no aborted transaction to look up in the .txnindex files
    index_ring: bytes  # K raw INDEX_ENTRYs; see index_entries()

    @property
    def published(self) -> bool:
        return self.log_end_offset >= 0

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields[:-1], self[:-1]))
        return f"PartitionView({fields}, index_ring=<{len(self.index_entries())} entries>)"

    def index_entries(self) -> list[tuple[int, int]]:
        """The valid ring entries, oldest first, as (absolute offset, position)."""
        k = len(self.index_ring) // _ENTRY
        total, base = self.index_total, self.active_segment_base_offset
        return [(base + rel, pos) for rel, pos in
                (_entry_unpack(self.index_ring, (n % k) * _ENTRY) for n in
                 range(total - min(total, k), total))]

    def lookup(self, offset: int) -> IndexPosition | None:
        """The largest ring entry <= ``offset`` (Kafka's OffsetIndex.lookup); (base, 0) when the
        ring holds the whole segment and no entry is that low; None when the offset is below
        the active segment or below the ring's oldest entry (use the segment's own index)."""
        base = self.active_segment_base_offset
        rel = offset - base
        if base < 0 or rel < 0:
            return None
        ring, total = self.index_ring, self.index_total
        k = len(ring) // _ENTRY
        if total:
            newest_rel, newest_pos = _entry_unpack(ring, ((total - 1) % k) * _ENTRY)
            if newest_rel <= rel:  # the common case: a consumer near the tail
                return _new(IndexPosition, (base, newest_pos))
            first = total - min(total, k)
            lo, hi = first, total - 1  # entries at >= hi are known to be > rel
            while lo < hi:
                mid = (lo + hi) // 2
                if _entry_unpack(ring, (mid % k) * _ENTRY)[0] <= rel:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > first:
                return _new(IndexPosition, (base, _entry_unpack(ring, ((lo - 1) % k) * _ENTRY)[1]))
        return _new(IndexPosition, (base, 0)) if total <= k else None
