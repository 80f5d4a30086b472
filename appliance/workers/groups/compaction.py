"""Compaction of ``__consumer_offsets`` by snapshot, on the partitions a coordinator leads.

The scheduling, the log start's move and their rules are ``workers/snapshot_compaction.py``'s,
shared with ``__transaction_state``; what is ours is what a snapshot restates: a partition's
live state (``offsets_log.snapshot_records``), then the offsets pending in open transactions
restated in transactional batches of their producers, so their markers still commit or abort
them. A partition is compacted once its log has grown by ``offsets.topic.segment.bytes``.
Event loop only.
"""

from __future__ import annotations

from appliance.workers.groups.offsets_log import (
    OFFSETS_TOPIC,
    offset_record,
    partition_for,
    snapshot_records,
)
from appliance.workers.snapshot_compaction import SnapshotCompaction


class Compaction(SnapshotCompaction):
    def __init__(self, coordinator):
        super().__init__(coordinator.worker, OFFSETS_TOPIC, coordinator.loads.loaded)
        self.coordinator = coordinator

    def segment_bytes(self) -> int:
        return self.worker.config.offsets_topic_segment_bytes

    async def _write(self, partition: int, held, start: int, now_ms: int) -> tuple[int, int]:
        coordinator = self.coordinator
        count = self.worker.control.topic(OFFSETS_TOPIC).partition_count
        mine = [g for g in coordinator.groups.values()
                if partition_for(g.group_id, count) == partition]
        offsets = {g.group_id: coordinator.restated(g.group_id) for g in mine}
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
        return last, len(records)
