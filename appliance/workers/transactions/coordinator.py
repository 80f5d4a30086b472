"""The transaction coordinator of one worker: the transactional ids of the
``__transaction_state`` partitions it leads (KIP-98), modelled on the group coordinator.

Placement: an id lives in partition ``txn_log.partition_for(id)``; the worker leading that
partition coordinates it (``groups.coordination.coordinator_epoch`` decides, as for groups).
The topic is created on first use (FindCoordinator key type 1, InitProducerId) with
``transaction.state.log.num.partitions`` partitions and, in cluster mode,
``transaction.state.log.replication.factor`` replicas (one alone, as the offsets topic) and
``min.insync.replicas`` = ``transaction.state.log.min.isr``.

Writes: every transition (``state.py``) is appended to the id's partition and answered only
once the high watermark has passed it (written before answered, as Kafka). While a write is
in flight the id answers CONCURRENT_TRANSACTIONS.

EndTxn: PrepareCommit/PrepareAbort written, answered, then the markers sent to every
partition's leader (``markers.py``), retried until each has answered, then
CompleteCommit/CompleteAbort written. A new coordinator (a leader change, a restart, a
kill -9) reloads the partition and sends the markers of every id it finds in Prepare* again.

Time: a sweep follows leadership every ``TICK_S``; every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` it aborts (with an epoch bump:
the producer is fenced) transactions open longer than their timeout; every
``transaction.remove.expired.transaction.cleanup.interval.ms`` it removes ids idle longer than
``transactional.id.expiration.ms`` (a tombstone).
"""

from __future__ import annotations

import asyncio
import logging

from appliance.identity import NODES_PER_APPLIANCE
from appliance.workers.coordinator_loads import PartitionLoads
from appliance.workers.groups.coordination import (
    ALONE,
    NotEnoughAppliances,
    commit_error,
    coordinator_epoch,
    offsets_replication_factor,
)
from appliance.workers.transactions import state as txn
from appliance.workers.transactions.compaction import TxnCompaction
from appliance.workers.transactions.markers import CoordinatorFenced, MarkerSender
from appliance.workers.transactions.state import TxnError, TxnMetadata, TxnState
from appliance.workers.transactions.txn_log import (
    TRANSACTION_TOPIC,
    LoadedTransactions,
    partition_for,
    record,
    replay,
)
from appliance.workers.transactions.verification import TxnVerifier
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch

log = logging.getLogger(__name__)

TICK_S = 0.1
WRITE_TIMEOUT_MS = 5000


class TransactionCoordinator:
    def __init__(self, worker, security):
        self.worker = worker
        self.ids: dict[str, TxnMetadata] = {}
        self.writing: set[str] = set()  # ids with a transition in flight
        self.inflight: dict[str, TxnMetadata] = {}  # their transitions, appended, not committed
        # the partitions of __transaction_state served here (``loaded``, ``loading``)
        self.loads = PartitionLoads(worker, TRANSACTION_TOPIC, epoch_of=self.epoch_of,
                                    new_state=LoadedTransactions, replay=replay,
                                    install=self._install, uninstall=self._drop)
        self.completing: dict[str, asyncio.Task] = {}  # ids whose markers are being sent
        self.markers = MarkerSender(worker, security)
        self.verifier = TxnVerifier(worker, security)  # KIP-890: a leader's questions
        self.compaction = TxnCompaction(self)
        self._task: asyncio.Task | None = None
        self._next_abort_ms = 0
        self._next_expire_ms = 0

    @property
    def loaded(self) -> dict[int, int]:
        """partition -> the leader epoch it is served in."""
        return self.loads.loaded

    @property
    def loading(self) -> dict[int, tuple[int, asyncio.Future]]:
        """partition -> (the leader epoch, the task loading it)."""
        return self.loads.loading

    # -- placement ----------------------------------------------------------------------------

    def ensure_topic(self):
        """``__transaction_state``, created if needed; CoordinatorError-like TxnError."""
        control, config = self.worker.control, self.worker.config
        info = control.topic(TRANSACTION_TOPIC)
        if info is not None:
            return info
        nodes = control.fleet_nodes
        live = None if nodes is None else len({n // NODES_PER_APPLIANCE for n in nodes})
        try:
            factor = offsets_replication_factor(
                config.transaction_state_log_replication_factor, live)
        except NotEnoughAppliances as exc:
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           str(exc).replace("__consumer_offsets", TRANSACTION_TOPIC).replace(
                               "offsets.topic", "transaction.state.log")) from None
        configs = {"retention.ms": "-1", "retention.bytes": "-1",
                   "segment.bytes": str(config.transaction_state_log_segment_bytes),
                   "min.insync.replicas": str(min(config.transaction_state_log_min_isr,
                                                  factor))}
        result = control.create_topic(TRANSACTION_TOPIC,
                                      config.transaction_state_log_num_partitions, factor,
                                      configs)
        if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE, result.message)
        info = control.topic(TRANSACTION_TOPIC)
        if info is None:
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                           f"{TRANSACTION_TOPIC} is not known here yet")
        return info

    def coordinator_partition(self, transactional_id: str):
        info = self.ensure_topic()
        return info, partition_for(transactional_id, info.partition_count)

    def epoch_of(self, info, partition: int) -> int | None:
        held = self.worker.partitions.get(TRANSACTION_TOPIC, partition)
        return coordinator_epoch(info, partition, worker_index=self.worker.index,
                                 node_id=self.worker.node_id, held=held is not None,
                                 leading_epoch=None if held is None else held.leader_epoch)

    def partition_here(self, transactional_id: str) -> int:
        """The id's partition if this worker coordinates it now; TxnError otherwise."""
        info = self.worker.control.topic(TRANSACTION_TOPIC)
        if info is None:
            raise TxnError(ErrorCode.NOT_COORDINATOR)
        partition = partition_for(transactional_id, info.partition_count)
        if self.epoch_of(info, partition) is None:
            if partition in self.loaded or partition in self.loading:
                self.follow_leadership()
            raise TxnError(ErrorCode.NOT_COORDINATOR)
        if partition in self.loaded:
            return partition
        raise TxnError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def coordinator_epoch_of(self, partition: int) -> int:
        epoch = self.loaded.get(partition, ALONE)
        return 0 if epoch == ALONE else epoch

    # -- leadership -----------------------------------------------------------------------------

    def follow_leadership(self) -> None:
        """Serve exactly the partitions this worker leads now (``coordinator_loads.py``)."""
        self.loads.follow()

    def _install(self, partition: int, epoch: int, plog, loaded: LoadedTransactions) -> None:
        """Serve a partition's ids as its log rebuilt them; complete those in Prepare*."""
        self.ids.update(loaded.ids)
        self.compaction.loaded(partition, self.worker.partitions.get(
            TRANSACTION_TOPIC, partition).log.size_bytes)
        prepared = [m for m in loaded.ids.values() if m.state in txn.PREPARED]
        log.info("worker %d loaded %s-%d: %d transactional id(s) from %d record(s), %d to "
                 "complete", self.worker.index, TRANSACTION_TOPIC, partition, len(loaded.ids),
                 loaded.records, len(prepared))
        if self.loads.running:
            for meta in prepared:
                self._complete_later(meta.transactional_id)

    def _drop(self, partition: int) -> None:
        """Forget a partition's ids (another node coordinates them now) and stop completing
        their transactions: the new coordinator completes them."""
        self.compaction.forget(partition)
        info = self.worker.control.topic(TRANSACTION_TOPIC)
        for transactional_id in list(self.ids):
            if info is None or partition_for(transactional_id, info.partition_count) == partition:
                del self.ids[transactional_id]
                task = self.completing.pop(transactional_id, None)
                if task is not None:
                    task.cancel()

    def unload_all(self) -> None:
        self.loads.unload_all()
        self.ids.clear()

    # -- writing --------------------------------------------------------------------------------

    async def _write(self, partition: int, meta: TxnMetadata) -> None:
        """Append ``meta``'s record and wait until it is committed; then it is the id's
        state here. TxnError (Kafka's retriable coordinator errors) if it is not."""
        transactional_id = meta.transactional_id
        if transactional_id in self.writing:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in flight")
        held = self.worker.partitions.get(TRANSACTION_TOPIC, partition)
        if held is None:
            raise TxnError(ErrorCode.NOT_COORDINATOR)
        refused = held.acks_all_refusal()
        if refused is not None:
            raise TxnError(commit_error(refused), f"{TRANSACTION_TOPIC}-{partition}: "
                                                  f"{refused.name}")
        now_ms = self.worker.now_ms()
        key, value = record(meta)
        outcome = held.append_as_leader(build_batch([(now_ms, key, value, ())], now_ms=now_ms),
                                        now_ms=now_ms)
        if outcome.error != ErrorCode.NONE:
            raise TxnError(commit_error(outcome.error), outcome.message or outcome.error.name)
        self.writing.add(transactional_id)
        self.inflight[transactional_id] = meta
        try:
            waiting = held.committed(outcome.last_offset, WRITE_TIMEOUT_MS)
            error = ErrorCode.NONE if waiting is None else await waiting
        finally:
            self.writing.discard(transactional_id)
            self.inflight.pop(transactional_id, None)
        if error != ErrorCode.NONE:
            raise TxnError(commit_error(error), f"{TRANSACTION_TOPIC}-{partition}: "
                                                f"{error.name}")
        if self.loaded.get(partition) is None:  # unloaded meanwhile: not ours any more
            raise TxnError(ErrorCode.NOT_COORDINATOR)
        if meta.state is TxnState.DEAD:
            self.ids.pop(transactional_id, None)
        else:
            self.ids[transactional_id] = meta

    def _check_current(self, transactional_id: str, producer_id: int,
                       producer_epoch: int) -> None:
        """Kafka's first check: a producer that is not the id's current one (as a transition
        in flight will leave it: a fence bumps the epoch at once) is answered that, never
        CONCURRENT_TRANSACTIONS, which would have it retry."""
        current = self.inflight.get(transactional_id) or self.ids.get(transactional_id)
        txn.check_producer(current, producer_id, producer_epoch)

    def _check_free(self, transactional_id: str) -> None:
        if transactional_id in self.writing:
            raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, "a transition is in flight")

    # -- requests -------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected_id: int, expected_epoch: int) -> TxnMetadata:
        """InitProducerId: the id's metadata after the bump; TxnError otherwise."""
        txn.check_transactional_id(transactional_id)
        partition = self.partition_here(transactional_id)
        self._check_free(transactional_id)
        result = txn.init_producer_id(
            self.ids.get(transactional_id), transactional_id, timeout_ms=timeout_ms,
            max_timeout_ms=self.worker.config.transaction_max_timeout_ms,
            expected_id=expected_id, expected_epoch=expected_epoch,
            new_producer_id=self._new_producer_id, now_ms=self.worker.now_ms())
        if result.write is not None:
            await self._write(partition, result.write)
        if result.answer != ErrorCode.NONE:  # an open transaction is being aborted first
            self._complete_later(transactional_id)
            raise TxnError(result.answer, "the open transaction is being aborted")
        return self.ids[transactional_id]

    def _new_producer_id(self) -> int:
        producer_id = self.worker.control.allocate_producer_id()
        if producer_id < 0:
            raise TxnError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no producer id to be had")
        return producer_id

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions) -> None:
        txn.check_transactional_id(transactional_id)
        partition = self.partition_here(transactional_id)
        self._check_current(transactional_id, producer_id, producer_epoch)
        self._check_free(transactional_id)
        meta = txn.add_partitions(self.ids.get(transactional_id), producer_id, producer_epoch,
                                  partitions, self.worker.now_ms())
        if meta is not None:
            await self._write(partition, meta)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions, not_added: ErrorCode) -> dict:
        """KIP-890's verification for a partition leader: each partition's ErrorCode (NONE:
        in the ongoing transaction); TxnError for the whole id. Nothing is written."""
        txn.check_transactional_id(transactional_id)
        self.partition_here(transactional_id)
        return txn.verify_partitions(self.ids.get(transactional_id), producer_id,
                                     producer_epoch, partitions, not_added)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> None:
        txn.check_transactional_id(transactional_id)
        partition = self.partition_here(transactional_id)
        self._check_current(transactional_id, producer_id, producer_epoch)
        self._check_free(transactional_id)
        meta = txn.end_txn(self.ids.get(transactional_id), producer_id, producer_epoch,
                           commit, self.worker.now_ms())
        if meta is None:
            return
        await self._write(partition, meta)
        self._complete_later(transactional_id)

    def _complete_later(self, transactional_id: str) -> None:
        """Send the markers of a Prepare* transaction, then write its Complete* state."""
        if transactional_id not in self.completing:
            self.completing[transactional_id] = asyncio.ensure_future(
                self._complete(transactional_id))

    async def _complete(self, transactional_id: str) -> None:
        try:
            while True:
                meta = self.ids.get(transactional_id)
                if meta is None or meta.state not in txn.PREPARED:
                    return
                partition = self.partition_here(transactional_id)

                def still_ours(meta=meta):
                    return self.ids.get(transactional_id) is meta

                await self.markers.deliver(
                    meta.producer_id, meta.producer_epoch,
                    meta.state is TxnState.PREPARE_COMMIT,
                    self.coordinator_epoch_of(partition), meta.partitions, still_ours)
                try:
                    await self._write(partition, txn.complete(meta, self.worker.now_ms()))
                except TxnError as exc:
                    log.warning("cannot complete the transaction of %r yet: %s",
                                transactional_id, exc)
                    await asyncio.sleep(0.5)
        except (TxnError, asyncio.CancelledError):
            return  # not ours any more: its new coordinator finishes it
        except CoordinatorFenced as exc:
            log.warning("%r: a newer coordinator fenced this one (%s)", transactional_id, exc)
        except Exception:
            log.exception("completing the transaction of %r failed", transactional_id)
        finally:
            if self.completing.get(transactional_id) is asyncio.current_task():
                del self.completing[transactional_id]

    # -- views ----------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata:
        self.partition_here(transactional_id)
        meta = self.ids.get(transactional_id)
        if meta is None:
            raise TxnError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        return meta

    def listed(self) -> list[TxnMetadata]:
        return list(self.ids.values())

    # -- time -----------------------------------------------------------------------------------

    def start(self) -> None:
        self.loads.running = True
        self._task = asyncio.ensure_future(self._sweep())
        self.follow_leadership()
        for meta in list(self.ids.values()):  # loaded before the loop ran (alone)
            if meta.state in txn.PREPARED:
                self._complete_later(meta.transactional_id)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for task in self.completing.values():
            task.cancel()
        self.loads.stop()
        self.markers.close()
        self.verifier.close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.follow_leadership()
                await self.tick(self.worker.now_ms())
                await self.compaction.sweep(self.loaded)
            except Exception:
                log.exception("transaction coordinator sweep failed")

    async def tick(self, now_ms: int) -> None:
        config = self.worker.config
        if now_ms >= self._next_abort_ms:
            self._next_abort_ms = \
                now_ms + config.transaction_abort_timed_out_transaction_cleanup_interval_ms
            for meta in [m for m in self.ids.values() if txn.timed_out(m, now_ms)]:
                await self._abort_timed_out(meta, now_ms)
        if now_ms >= self._next_expire_ms:
            self._next_expire_ms = \
                now_ms + config.transaction_remove_expired_transaction_cleanup_interval_ms
            for meta in [m for m in self.ids.values()
                         if txn.expired(m, now_ms, config.transactional_id_expiration_ms)]:
                await self._expire(meta, now_ms)

    async def _abort_timed_out(self, meta: TxnMetadata, now_ms: int) -> None:
        transactional_id = meta.transactional_id
        try:
            partition = self.partition_here(transactional_id)
            self._check_free(transactional_id)
            log.info("aborting the transaction of %r: open longer than %d ms",
                     transactional_id, meta.timeout_ms)
            await self._write(partition, txn.abort_with_fence(meta, now_ms,
                                                              self._new_producer_id))
            self._complete_later(transactional_id)
        except TxnError as exc:
            log.info("cannot abort the timed-out transaction of %r yet: %s",
                     transactional_id, exc)

    async def _expire(self, meta: TxnMetadata, now_ms: int) -> None:
        try:
            partition = self.partition_here(meta.transactional_id)
            self._check_free(meta.transactional_id)
            await self._write(partition, meta.to(TxnState.DEAD, now_ms))
            log.info("transactional id %r expired", meta.transactional_id)
        except TxnError as exc:
            log.info("cannot expire %r yet: %s", meta.transactional_id, exc)
