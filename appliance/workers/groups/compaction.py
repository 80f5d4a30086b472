"""Compaction of ``__consumer_offsets`` by snapshot, on the partitions a coordinator leads.

A partition whose log has grown by ``offsets.topic.segment.bytes`` since its last snapshot is
rolled, its live state restated in the fresh segment (``offsets_log.snapshot_records``) and
made durable (the offsets pending in open transactions are restated in transactional batches of
their producers, so their markers still commit or abort them); then the log start moves to the
snapshot (``delete_records_before``) and the segments wholly before it go, so a load replays
one snapshot and what followed it, and no file is rewritten. Followers follow the leader's log
start (``replication/fetcher.py``), so their copies shrink with the leader's.

The log start moves only once the high watermark has passed the whole snapshot (at once for
a single copy): before, a new leader elected from the ISR could hold the older records but not
yet the snapshot, and a follower moving its own start there (bounded by its high watermark)
would keep neither. Event loop only.
"""

from __future__ import annotations

import logging

from appliance.workers.groups.offsets_log import (
    OFFSETS_TOPIC,
    offset_record,
    partition_for,
    snapshot_records,
)

log = logging.getLogger(__name__)


class Compaction:
    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.worker = coordinator.worker
        self.floor: dict[int, int] = {}  # partition -> log size right after its last snapshot
        # partition -> (the snapshot's first offset, its last): the log start moves to the
        # first once the high watermark has passed the last
        self.pending: dict[int, tuple[int, int]] = {}

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
        segment_bytes = self.worker.config.offsets_topic_segment_bytes
        for partition in sorted(partitions):
            owned = self.worker.partitions.get(OFFSETS_TOPIC, partition)
            if owned is None or partition in self.pending:
                continue
            if owned.log.size_bytes - self.floor.get(partition, 0) >= segment_bytes:
                await self.snapshot(partition)

    async def snapshot(self, partition: int) -> None:
        """Restate the partition's live state in a fresh segment, make it durable, and drop
        everything before it once it is committed (module docstring)."""
        coordinator = self.coordinator
        plog = self.worker.partitions.get(OFFSETS_TOPIC, partition).log
        plog.roll(now_ms=self.worker.now_ms())
        start = plog.log_end_offset
        count = self.worker.control.topic(OFFSETS_TOPIC).partition_count
        mine = [g for g in coordinator.groups.values()
                if partition_for(g.group_id, count) == partition]
        offsets = {g.group_id: coordinator.offsets.get(g.group_id, {}) for g in mine}
        records = list(snapshot_records(mine, offsets))
        last = start - 1
        if records:
            last = coordinator.append(partition, records)
        # offsets pending in open transactions: restated in a transactional batch of their
        # producer, after the committed ones, so the producer's marker still decides them
        pending = list(coordinator.pending.of_groups(
            lambda group_id: partition_for(group_id, count) == partition))
        for producer_id, epoch, group_id, values in pending:
            last = coordinator.append(partition, [
                offset_record(group_id, topic, index, value)
                for (topic, index), value in values.items()], (producer_id, epoch))
            records.extend(values)
        if last >= start:
            await coordinator.durable(partition, last)
        if partition not in coordinator.loads.loaded:
            return  # unloaded meanwhile: the new leader compacts
        self.pending[partition] = (start, last)
        self.floor[partition] = plog.size_bytes
        log.info("%s-%d: snapshot of %d record(s) at offset %d", OFFSETS_TOPIC, partition,
                 len(records), start)
        self._move_log_start(partition)

    def _move_log_start(self, partition: int) -> None:
        start, last = self.pending[partition]
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        if held is None:
            del self.pending[partition]
            return
        if held.high_watermark <= last:
            return  # not committed yet
        del self.pending[partition]
        deleted = held.delete_records_before(start, now_ms=self.worker.now_ms())
        self.floor[partition] = held.log.size_bytes
        log.info("%s-%d: log start %d after the snapshot; %d old segment(s) deleted",
                 OFFSETS_TOPIC, partition, held.log_start_offset, deleted)
