"""Compaction of ``__transaction_state`` by snapshot, as the group coordinator compacts
``__consumer_offsets`` (``groups/compaction.py``): a partition whose log has grown by
``transaction.state.log.segment.bytes`` since its last snapshot is rolled, the latest record
of every id it holds is restated in the fresh segment and made durable, and once the high
watermark has passed the snapshot the log start moves to it (followers follow the leader's log
start). A load then replays one snapshot and what followed it.

The snapshot states what the log states: a transition still waiting for its commit is in the
log already, so the snapshot takes it (``TransactionCoordinator.inflight``) over the state
last acknowledged. Event loop only.
"""

from __future__ import annotations

import logging

from appliance.workers.transactions.txn_log import TRANSACTION_TOPIC, partition_for, record
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch

log = logging.getLogger(__name__)

RECORDS_PER_BATCH = 2000


class TxnCompaction:
    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.worker = coordinator.worker
        self.floor: dict[int, int] = {}  # partition -> log size right after its last snapshot
        self.pending: dict[int, tuple[int, int]] = {}  # partition -> (first, last) offsets

    def loaded(self, partition: int, size_bytes: int) -> None:
        self.floor[partition] = size_bytes
        self.pending.pop(partition, None)

    def forget(self, partition: int) -> None:
        self.floor.pop(partition, None)
        self.pending.pop(partition, None)

    async def sweep(self, partitions) -> None:
        for partition in list(self.pending):
            self._move_log_start(partition)
        segment_bytes = self.worker.config.transaction_state_log_segment_bytes
        for partition in sorted(partitions):
            held = self.worker.partitions.get(TRANSACTION_TOPIC, partition)
            if held is None or partition in self.pending:
                continue
            if held.log.size_bytes - self.floor.get(partition, 0) >= segment_bytes:
                await self.snapshot(partition)

    def _records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        count = self.worker.control.topic(TRANSACTION_TOPIC).partition_count
        latest = {**self.coordinator.ids, **self.coordinator.inflight}
        return [record(meta) for tid, meta in sorted(latest.items())
                if partition_for(tid, count) == partition]

    async def snapshot(self, partition: int) -> None:
        held = self.worker.partitions.get(TRANSACTION_TOPIC, partition)
        now_ms = self.worker.now_ms()
        held.log.roll(now_ms=now_ms)
        start = held.log.log_end_offset
        records = self._records(partition)
        last = start - 1
        for first in range(0, len(records), RECORDS_PER_BATCH):
            chunk = records[first:first + RECORDS_PER_BATCH]
            outcome = held.append_as_leader(
                build_batch([(now_ms, k, v, ()) for k, v in chunk], now_ms=now_ms),
                now_ms=now_ms)
            if outcome.error != ErrorCode.NONE:
                log.warning("%s-%d: snapshot not written: %s", TRANSACTION_TOPIC, partition,
                            outcome.error.name)
                return
            last = outcome.last_offset
        if records:
            waiting = self.worker.committer.durable(held.log, last)
            if waiting is not None:
                await waiting
        if partition not in self.coordinator.loaded:
            return  # unloaded meanwhile: the new leader compacts
        self.pending[partition] = (start, last)
        self.floor[partition] = held.log.size_bytes
        log.info("%s-%d: snapshot of %d record(s) at offset %d", TRANSACTION_TOPIC, partition,
                 len(records), start)
        self._move_log_start(partition)

    def _move_log_start(self, partition: int) -> None:
        start, last = self.pending[partition]
        held = self.worker.partitions.get(TRANSACTION_TOPIC, partition)
        if held is None:
            del self.pending[partition]
            return
        if held.high_watermark <= last:
            return
        del self.pending[partition]
        deleted = held.delete_records_before(start, now_ms=self.worker.now_ms())
        self.floor[partition] = held.log.size_bytes
        log.info("%s-%d: log start %d after the snapshot; %d old segment(s) deleted",
                 TRANSACTION_TOPIC, partition, held.log_start_offset, deleted)
