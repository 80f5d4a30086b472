"""Compaction of ``__transaction_state`` by snapshot, as the group coordinator compacts
``__consumer_offsets``: the scheduling and the log start's move are
``workers/snapshot_compaction.py``'s. A partition whose log has grown by
``transaction.state.log.segment.bytes`` since its last snapshot restates the latest record of
every id it holds in a fresh segment.

The snapshot states what the log states: a transition still waiting for its commit is in the
log already, so the snapshot takes it (``TransactionCoordinator.inflight``) over the state
last acknowledged. Event loop only.
"""

from __future__ import annotations

import logging

from appliance.workers.snapshot_compaction import SnapshotCompaction
from appliance.workers.transactions.txn_log import TRANSACTION_TOPIC, partition_for, record
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch

log = logging.getLogger(__name__)

RECORDS_PER_BATCH = 2000


class TxnCompaction(SnapshotCompaction):
    def __init__(self, coordinator):
        super().__init__(coordinator.worker, TRANSACTION_TOPIC, coordinator.loaded)
        self.coordinator = coordinator

    def segment_bytes(self) -> int:
        return self.worker.config.transaction_state_log_segment_bytes

    def _records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        count = self.worker.control.topic(TRANSACTION_TOPIC).partition_count
        latest = {**self.coordinator.ids, **self.coordinator.inflight}
        return [record(meta) for tid, meta in sorted(latest.items())
                if partition_for(tid, count) == partition]

    async def _write(self, partition: int, held, start: int,
                     now_ms: int) -> tuple[int, int] | None:
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
                return None
            last = outcome.last_offset
        if records:
            waiting = self.worker.committer.durable(held.log, last)
            if waiting is not None:
                await waiting
        return last, len(records)
