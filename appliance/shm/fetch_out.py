"""Fetch-out counters: what each worker served from each partition.

Any worker may serve any partition's Fetch, so a per-partition counter would have many
writers. Instead each worker has its own table (layout: one 64-byte line with the table's
sequence, then one OUT_CELL per partition slot): a single writer per table, and no cache line
shared between two writers. A cell also holds the slot's epoch when it was counted, so a slot
reused by another partition never inherits the previous partition's counts; readers sum the
cells of the epoch they read.

Only the table's worker calls :meth:`FetchOutTable.add_partition_out`; anyone reads. A worker
killed mid-count leaves its table's sequence odd: readers get None for that worker (status
says so) until its next incarnation repairs the sequence (WorkerTable.claim_worker). The cell
being written keeps whatever it holds: these are counters, not offsets.
"""

from __future__ import annotations

from . import seqlock
from .layout import OUT_CELL, OUT_TABLE_HEAD, Geometry
from .seqlock import TornEntryError

_armed = seqlock.armed


class FetchOutTable:
    """The fetch-out tables of one mapped region (``buf``: an mmap, or a bytearray)."""

    def __init__(self, buf, geometry: Geometry, *, timeout_s: float = seqlock.DEFAULT_TIMEOUT_S):
        self._buf = buf
        self.geometry = geometry
        self.timeout_s = timeout_s
        self._tables = [geometry.out_table(w) for w in range(geometry.max_workers)]

    def _cell(self, slot: int) -> int:
        if not 0 <= slot < self.geometry.max_partitions:
            raise IndexError(f"partition slot {slot} out of range")
        return OUT_TABLE_HEAD + OUT_CELL.size * slot

    def add_partition_out(self, slot: int, epoch: int, worker: int, bytes_out: int,
                          records_out: int) -> None:
        """Count what ``worker`` (the caller) served from the slot; ``epoch`` is the one of the
        PartitionView it served from."""
        if worker < 0:
            raise IndexError(f"worker index {worker} out of range")
        table = self._tables[worker]
        cell = table + self._cell(slot)
        buf = self._buf
        old_epoch, old_bytes, old_records = OUT_CELL.unpack_from(buf, cell)
        if old_epoch != epoch:
            old_bytes = old_records = 0
        body = OUT_CELL.pack(epoch, old_bytes + bytes_out, old_records + records_out)
        odd = seqlock.begin(buf, table, "fetch-out table")
        buf[cell:cell + OUT_CELL.size] = body
        if _armed:
            seqlock.fire("out.mid_write")
        seqlock.end(buf, table, odd)

    def partition_out(self, slot: int, epoch: int) -> list[tuple[int, int] | None]:
        """Per worker: (bytes_out, records_out) served from the slot at ``epoch``; None where
        that worker's table is torn (the worker died mid-count and is not back yet)."""
        cell = self._cell(slot)
        counts: list[tuple[int, int] | None] = []
        for worker, table in enumerate(self._tables):
            try:
                _, raw = seqlock.read_span(self._buf, table, table + cell,
                                           table + cell + OUT_CELL.size,
                                           f"fetch-out table of worker {worker}", self.timeout_s)
            except TornEntryError:
                counts.append(None)
                continue
            cell_epoch, nbytes, records = OUT_CELL.unpack(raw)
            counts.append((nbytes, records) if cell_epoch == epoch else (0, 0))
        return counts
