"""Compaction by snapshot of an internal topic's partitions that a coordinator serves.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) compact their logs the same way; only what a snapshot restates
differs, so that is all a subclass writes (``_write``). This class keeps the scheduling, once
for both:

A partition whose log has grown by the topic's segment bytes since its last snapshot is
rolled, its live state restated in the fresh segment and made durable; then the log start
moves to the snapshot (``delete_records_before``) and the segments wholly before it go, so a
load replays one snapshot and what followed it, and no file is rewritten. Followers follow the
leader's log start (``replication/fetcher.py``), so their copies shrink with the leader's.

The log start moves only once the high watermark has passed the whole snapshot (at once for
a single copy): before, a new leader elected from the ISR could hold the older records but not
yet the snapshot, and a follower moving its own start there (bounded by its high watermark)
would keep neither. Event loop only.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class SnapshotCompaction:
    """``loaded`` is the coordinator's dict of the partitions it serves (partition -> leader
    epoch), read, never written: a partition unloaded while its snapshot was written is left
    to its new leader to compact."""

    def __init__(self, worker, topic: str, loaded: dict[int, int]):
        self.worker = worker
        self.topic = topic
        self.served = loaded
        self.floor: dict[int, int] = {}  # partition -> log size right after its last snapshot
        # partition -> (the snapshot's first offset, its last): the log start moves to the
        # first once the high watermark has passed the last
        self.pending: dict[int, tuple[int, int]] = {}

    def segment_bytes(self) -> int:
        """How much a partition's log grows before it is compacted again (the topic's key)."""
        raise NotImplementedError

    async def _write(self, partition: int, held, start: int, now_ms: int) -> tuple[int, int] | None:
        """Append the partition's snapshot from ``start`` (the fresh segment, rolled at
        ``now_ms``) and wait until it is durable here: (its last offset, how many records
        it restates); None when it was not written."""
        raise NotImplementedError

    def loaded(self, partition: int, size_bytes: int) -> None:
        self.floor[partition] = size_bytes
        self.pending.pop(partition, None)

    def forget(self, partition: int) -> None:
        self.floor.pop(partition, None)
        self.pending.pop(partition, None)

    async def sweep(self, partitions) -> None:
        """Move the log starts that may move now; snapshot what has grown enough."""
        for partition in list(self.pending):
            self._move_log_start(partition)
        segment_bytes = self.segment_bytes()
        for partition in sorted(partitions):
            held = self.worker.partitions.get(self.topic, partition)
            if held is None or partition in self.pending:
                continue
            if held.log.size_bytes - self.floor.get(partition, 0) >= segment_bytes:
                await self.snapshot(partition)

    async def snapshot(self, partition: int) -> None:
        """Restate the partition's live state in a fresh segment, make it durable, and drop
        everything before it once it is committed (module docstring)."""
        held = self.worker.partitions.get(self.topic, partition)
        now_ms = self.worker.now_ms()
        held.log.roll(now_ms=now_ms)
        start = held.log.log_end_offset
        written = await self._write(partition, held, start, now_ms)
        if written is None:
            return
        last, count = written
        if partition not in self.served:
            return  # unloaded meanwhile: the new leader compacts
        self.pending[partition] = (start, last)
        self.floor[partition] = held.log.size_bytes
        log.info("%s-%d: snapshot of %d record(s) at offset %d", self.topic, partition, count,
                 start)
        self._move_log_start(partition)

    def _move_log_start(self, partition: int) -> None:
        start, last = self.pending[partition]
        held = self.worker.partitions.get(self.topic, partition)
        if held is None:
            del self.pending[partition]
            return
        if held.high_watermark <= last:
            return  # not committed yet
        del self.pending[partition]
        deleted = held.delete_records_before(start, now_ms=self.worker.now_ms())
        self.floor[partition] = held.log.size_bytes
        log.info("%s-%d: log start %d after the snapshot; %d old segment(s) deleted",
                 self.topic, partition, held.log_start_offset, deleted)
