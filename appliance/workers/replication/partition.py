"""A `Partition`: one replica of one partition held by this worker, and every rule of its state.

As Kafka's `Partition`, it owns the log, the idempotent producers' state, the replica's role
(leader or follower, leader epoch, ISR), the leader's books on its followers, the high
watermark and the acks=all appends waiting for it. Each operation is a method that does its
own bookkeeping, in this order: the log, the producer state, the shm publication (so every
worker of the appliance serves the new state), then the waiters it releases (long-polling
fetches, acks=all appends). Nothing else changes a partition's log.

- **Leader** (or a single copy, which leads itself): `append_as_leader` checks the producer's
  sequences, appends with this leader's epoch stamped into every batch, and for acks=all
  returns one future that resolves once the batch is durable here (the worker's group
  commit) and, when replicated, once the high watermark has passed it.
  `record_follower_fetch` is the leader's side of a replica fetch: the follower's fetch
  offset is its log end; the high watermark is the lowest log end in the ISR; a follower
  that caught up is asked back into the ISR.
- **Follower**: `append_as_follower` takes what one fetch response brought for this
  partition: the leader's batches as they are, its high watermark and its log start.
  `truncate_to` and `truncate_fully_and_start_at` cut the log where the leader's epochs say
  (the fetcher decides where).

- **Transactions** (KIP-98): the producer state tracks each producer's open transaction;
  `write_marker` (the leader's side of WriteTxnMarkers) appends the COMMIT or ABORT control
  batch that ends one, followers take markers with the rest of the leader's batches, and an
  ABORT is indexed in the segment's .txnindex. The earliest open transaction holds the last
  stable offset back (read_committed reads below it), never the high watermark. `on_marker`
  lets the group coordinator hear of the markers of its partitions.

Replicas of a single-copy partition, and every partition of an appliance without ZooKeeper,
have no role: they behave as a single log always did. Event loop only; the worker is the only
writer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from appliance.control.topics import PartitionLeadership
from appliance.segments.errors import CorruptRecordError, RecordTooLargeError, StorageError
from appliance.segments.log import EMPTY_SLICE, PartitionLog, ReadSlice
from appliance.workers.replication.acks import AcksWaiters
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.markers import marker_batch, read_marker
from appliance.workers.replication.producer_state import ProducerStates, Verdict
from appliance.workers.replication.role import Role
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import CorruptBatchError, scan_batches
from klog.protocol.record_keys import keyless_batch_index

log = logging.getLogger(__name__)

ACKS_ALL = -1


@dataclass(frozen=True)
class AppendOutcome:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    # acks=all: resolved with the append's ErrorCode once durable and committed; None when
    # it already is (or acks is not all)
    committed: asyncio.Future | None = None


class Partition:
    def __init__(self, topic: str, index: int, plog: PartitionLog, context: ReplicaContext,
                 *, ask_isr: Callable[[Partition, tuple[int, ...]], None]):
        self.topic = topic
        self.index = index
        self.key = (topic, index)
        self.log = plog
        self.producers = self._replay(plog)
        self.role: Role | None = None  # None: not replicated (a single copy leads itself)
        # the group coordinator's hook (a partition of __consumer_offsets): called with
        # (producer_id, commit, marker offset) after each marker lands here, leader or follower
        self.on_marker: Callable[[int, bool, int], None] | None = None
        self.publication = context.publisher.start(topic, index, plog)
        self._context = context
        self._ask_isr = ask_isr  # the manager's: one ISR change at a time, retried
        self._acks = AcksWaiters()
        # DeleteRecords waiting for the replicas' log starts (Kafka's DelayedDeleteRecords):
        # released when the low watermark passes (offset - 1), i.e. reaches the offset
        self._deletions = AcksWaiters()

    # what a Fetch reads (appliance.segments.readable.ReadableLog) ------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def read(self, offset: int, max_bytes: int, *, committed: bool = False) -> ReadSlice:
        """A consumer's read, below the high watermark (the last stable offset when
        `committed`: read_committed)."""
        return self.log.read(offset, max_bytes, committed=committed)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list:
        return self.log.aborted_transactions(fetch_offset, upper_offset)

    # facts -------------------------------------------------------------------------------

    @property
    def leader_epoch(self) -> int | None:
        """The epoch this replica leads in (stamped into its appends); None otherwise."""
        role = self.role
        return role.state.leader_epoch if role is not None and role.leading else None

    def acks_all_refusal(self) -> ErrorCode | None:
        """NOT_ENOUGH_REPLICAS while a replicated leader's ISR is below min.insync.replicas."""
        role = self.role
        if role is None or not role.leading:
            return None
        if len(role.state.isr) < self.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return None

    def publish(self, records_in: int = 0, bytes_in: int = 0) -> None:
        """Mirror the log's state into the shm region (after any change of it)."""
        self._context.publisher.publish(self.publication, self.log, records_in, bytes_in)

    # the leader's side -------------------------------------------------------------------

    def append_as_leader(self, records, *, now_ms: int, required_acks: int = 1,
                         timeout_ms: int = 30_000, guard=False) -> AppendOutcome:
        """Append a Produce request's records, with the idempotent producers' checks
        (a retried batch is acknowledged with its first offsets, not appended again).
        ``guard`` (KIP-890): False when no verification is required (the coordinators'
        own appends, or verification off); else what `start_verification` handed out for
        this request (None: nothing verified), without which a transactional batch may not
        start a transaction here (INVALID_TXN_STATE)."""
        if required_acks == ACKS_ALL:
            refused = self.acks_all_refusal()
            if refused is not None:
                return AppendOutcome(refused, message="the ISR is smaller than "
                                     "min.insync.replicas")
        if records is None or len(records) == 0:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message="empty records")
        try:
            headers = [h for _, h in scan_batches(records, verify_crc=False)]
        except CorruptBatchError as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        if not headers:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message="no whole batch in records")
        if any(h.is_control for h in headers):
            return AppendOutcome(ErrorCode.INVALID_RECORD,
                                 message="a client may not append control batches")
        if self.log.config.compact:
            refused = self._keyless_refusal(records)
            if refused is not None:
                return refused
        producers = self.producers
        verdicts = [producers.check(h, guard) for h in headers]
        if len(headers) == 1 and verdicts[0][0] is Verdict.DUPLICATE:
            cached = verdicts[0][1]
            return self._appended(cached.base_offset, cached.last_offset,
                                  cached.log_append_time_ms, required_acks, timeout_ms)
        for verdict, _ in verdicts:
            if verdict is Verdict.FENCED:
                return AppendOutcome(ErrorCode.INVALID_PRODUCER_EPOCH)
            if verdict is Verdict.INVALID_TXN_STATE:
                return AppendOutcome(ErrorCode.INVALID_TXN_STATE, message="a transaction of "
                                     "this producer is open: its batches must be transactional")
            if verdict is Verdict.UNVERIFIED:
                return AppendOutcome(ErrorCode.INVALID_TXN_STATE, message="Record was not "
                                     "part of an ongoing transaction")
            if verdict is not Verdict.APPEND:
                return AppendOutcome(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        try:
            info = self.log.append(records, now_ms=now_ms, leader_epoch=self.leader_epoch)
        except (CorruptRecordError, CorruptBatchError) as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        except RecordTooLargeError as exc:
            return AppendOutcome(ErrorCode.MESSAGE_TOO_LARGE, message=str(exc))
        except StorageError as exc:
            log.error("append to %s-%d failed: %s", *self.key, exc)
            return AppendOutcome(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        offset = info.base_offset
        for header in headers:
            producers.record(header, offset, info.log_append_time_ms)
            offset += header.last_offset_delta + 1
        if producers.first_unstable_offset != self.log.first_unstable_offset:
            self.log.first_unstable_offset = producers.first_unstable_offset
        self.publish(info.record_count, len(records))
        self._context.waiters.notify(*self.key)
        return self._appended(info.base_offset, info.last_offset, info.log_append_time_ms,
                              required_acks, timeout_ms)

    def _keyless_refusal(self, records) -> AppendOutcome | None:
        """A compacted topic keeps the latest record per key: a record without a key has no
        place in it (Kafka's INVALID_RECORD, checked per batch before anything is written)."""
        try:
            keyless = keyless_batch_index(records)
        except CorruptBatchError as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        if keyless is None:
            return None
        return AppendOutcome(ErrorCode.INVALID_RECORD, message=(
            f"Compacted topic cannot accept message without key in topic partition "
            f"{self.topic}-{self.index}."))

    def _appended(self, base_offset: int, last_offset: int, append_time_ms: int,
                  required_acks: int, timeout_ms: int) -> AppendOutcome:
        committed = (self.committed(last_offset, timeout_ms) if required_acks == ACKS_ALL
                     else None)
        return AppendOutcome(base_offset=base_offset, last_offset=last_offset,
                             log_append_time_ms=append_time_ms,
                             log_start_offset=self.log.log_start_offset, committed=committed)

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int, now_ms: int, *,
                     timeout_ms: int = 30_000) -> AppendOutcome:
        """WriteTxnMarkers on this leader: append the control batch that ends the producer's
        transaction (COMMIT or ABORT), index it if aborted, and answer as an acks=all append
        (`committed` resolves once it is durable and, replicated, under the high watermark).
        An older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch than
        the last marker's TRANSACTION_COORDINATOR_FENCED (Kafka's checks). A marker for a
        producer without an open transaction here is written all the same (a coordinator's
        retry), as Kafka does."""
        refused = self.acks_all_refusal()
        if refused is not None:
            return AppendOutcome(refused, message="the ISR is smaller than min.insync.replicas")
        verdict = self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if verdict is Verdict.FENCED:
            return AppendOutcome(ErrorCode.INVALID_PRODUCER_EPOCH)
        if verdict is Verdict.COORDINATOR_FENCED:
            return AppendOutcome(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
        batch = marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now_ms)
        try:
            info = self.log.append(batch, now_ms=now_ms, leader_epoch=self.leader_epoch)
        except StorageError as exc:
            log.error("marker on %s-%d failed: %s", *self.key, exc)
            return AppendOutcome(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        self._marker_appended(producer_id, producer_epoch, commit, coordinator_epoch,
                              info.base_offset)
        self.publish(info.record_count, len(batch))
        self._context.waiters.notify(*self.key)
        return self._appended(info.base_offset, info.last_offset, info.log_append_time_ms,
                              ACKS_ALL, timeout_ms)

    def _marker_appended(self, producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, offset: int) -> None:
        """The producer state, the .txnindex and the hook after a marker landed at `offset`
        (leader or follower). A .txnindex that cannot be written is logged: recovery rebuilds
        it from the log."""
        producers = self.producers
        done = producers.record_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                       offset)
        self.log.first_unstable_offset = producers.first_unstable_offset
        if done is not None and done.aborted:
            try:
                self.log.add_aborted_txn(producers.aborted_entry(done))
            except StorageError as exc:
                log.error("%s-%d: cannot index the aborted transaction of producer %d: %s",
                          *self.key, producer_id, exc)
        if self.on_marker is not None:
            self.on_marker(producer_id, commit, offset)

    def committed(self, last_offset: int, timeout_ms: int) -> asyncio.Future | None:
        """acks=all's one wait: a future resolved with NONE once offsets up to `last_offset`
        are durable here and, if this replica was a replicated leader when asked, the high
        watermark has passed them (`AcksWaiters` says what else it may answer); a failed
        fdatasync answers KAFKA_STORAGE_ERROR. None: committed already."""
        replicated = self.role is not None
        try:
            durable = self._context.committer.durable(self.log, last_offset)
        except RuntimeError:  # the committer is closed: the worker is stopping
            return _resolved(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if durable is None:
            if not replicated or self.log.high_watermark > last_offset:
                return None
            answer = asyncio.get_running_loop().create_future()
            self._await_high_watermark(last_offset, answer, timeout_ms / 1000)
            return answer
        answer = durable.get_loop().create_future()

        def synced(sync: asyncio.Future) -> None:
            if answer.done():
                return
            failure = sync.exception() if not sync.cancelled() else None
            if failure is not None or sync.cancelled():
                log.error("%s-%d: fdatasync failed: %s", *self.key, failure)
                lost = replicated and (self.role is None or not self.role.leading)
                answer.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER if lost
                                  else ErrorCode.KAFKA_STORAGE_ERROR)
            elif not replicated:
                answer.set_result(ErrorCode.NONE)
            else:
                self._await_high_watermark(last_offset, answer, timeout_ms / 1000)

        durable.add_done_callback(synced)
        return answer

    def _await_high_watermark(self, last_offset: int, answer: asyncio.Future,
                              timeout_s: float) -> None:
        if self.log.high_watermark > last_offset:
            answer.set_result(ErrorCode.NONE)
        elif self.role is None or not self.role.leading:
            answer.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        else:
            self._acks.add(last_offset, answer, max(timeout_s, 0.0))

    def record_follower_fetch(self, replica_id: int, fetch_offset: int,
                              current_leader_epoch: int, max_bytes: int,
                              log_start_offset: int = -1):
        """A follower's fetch at `fetch_offset`: its log end is that now. Returns what it
        reads (up to the log end, past the high watermark; nothing when `max_bytes` <= 0) or
        the ErrorCode that refuses it. A follower that names another leader epoch than ours
        (KIP-320) is refused: an older one has not truncated for this epoch yet
        (FENCED_LEADER_EPOCH), a newer one means we have not heard of it yet
        (UNKNOWN_LEADER_EPOCH); either way it must not copy from this log now. Raises
        OffsetOutOfRangeError, StorageError as a read does. `log_start_offset` (Fetch v5+) is
        the follower's own log start: DeleteRecords waits for it (`deleted_on_replicas`)."""
        role = self.role
        if role is None or not role.leading or replica_id not in role.state.replicas:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if 0 <= current_leader_epoch < role.state.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > role.state.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        plog = self.log
        if log_start_offset >= 0:
            role.follower_starts[replica_id] = log_start_offset
            if self._deletions:
                self._deletions.release(self.low_watermark(), ErrorCode.NONE)
        if fetch_offset <= plog.log_end_offset:
            role.note_fetch(replica_id, fetch_offset, plog.log_end_offset, time.monotonic())
            self.update_high_watermark()
            if (replica_id not in role.state.isr and fetch_offset >= plog.high_watermark
                    and replica_id in (self._context.control.fleet_nodes or {})):
                # caught up, and live as the fleet sees it (or the controller, which drops
                # dead nodes from the ISR, would drop it again)
                self._ask_isr(self, tuple(role.state.isr) + (replica_id,))
        if max_bytes <= 0:
            return EMPTY_SLICE
        return plog.read_replica(fetch_offset, max_bytes)

    def note_idle_fetch(self, replica_id: int, fetch_offset: int, current_leader_epoch: int,
                        log_start_offset: int) -> bool:
        """A follower of the ISR fetching again from our log end, where its last fetch
        stood: nothing can change (its log end is the one noted, so the high watermark and
        the ISR stay; a read at our log end is empty), so the fetch is only noted as caught
        up, and True tells the caller to answer nothing. False: not that case, nothing
        noted, :meth:`record_follower_fetch` decides. Why: a follower's session holds every
        partition it copies from us, and each of its idle fetches passes through all of
        them twice; the full path was a third of an idle fleet's CPU (10,000 partitions on
        three appliances of two workers: 14-16 % of a core per worker, 10-11 % with this)."""
        role = self.role
        if role is None or not role.leading:
            return False
        state, log_end = role.state, self.log.log_end_offset
        if not (current_leader_epoch < 0 or current_leader_epoch == state.leader_epoch):
            return False
        if fetch_offset != log_end or role.follower_ends.get(replica_id) != fetch_offset or \
                replica_id not in state.isr or replica_id not in state.replicas:
            return False
        if log_start_offset >= 0 and role.follower_starts.get(replica_id) != log_start_offset:
            return False
        role.note_fetch(replica_id, fetch_offset, log_end, time.monotonic())
        return True

    def update_high_watermark(self) -> None:
        """A leader's high watermark from the ISR's log ends; wake what it releases."""
        role, plog = self.role, self.log
        node_id = self._context.node_id
        plog.hold_high_watermark = any(r != node_id for r in role.maximal_isr())
        high_watermark = role.high_watermark(plog.log_end_offset, node_id)
        if high_watermark is not None and plog.set_high_watermark(high_watermark):
            self.publish()
            self._context.waiters.notify_readers(*self.key)  # followers wait for batches
        short = len(role.state.isr) < plog.config.min_insync_replicas
        self._acks.release(plog.high_watermark, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                           if short else ErrorCode.NONE)

    def lagging_followers(self, now: float, lag_s: float) -> list[int]:
        role = self.role
        if role is None or not role.leading:
            return []
        return role.lagging(self._context.node_id, now, lag_s)

    def isr_written(self, leader_epoch: int, isr: tuple[int, ...]) -> bool:
        """The controller wrote the ISR this leader asked for in `leader_epoch`: it is ours
        now, before the fleet's broadcast says so. False if the role moved on meanwhile."""
        role = self.role
        if role is None or not role.leading or role.state.leader_epoch != leader_epoch:
            return False
        role.with_isr(isr)
        self.update_high_watermark()
        return True

    # the follower's side -----------------------------------------------------------------

    def append_as_follower(self, records, *, leader_high_watermark: int,
                           leader_log_start_offset: int, now_ms: int) -> bool:
        """What one fetch response brought for this partition: the leader's batches, appended
        as they are (offsets and leader epochs kept), its high watermark and its log start.
        False when the first batch does not start at our log end (the leader's batch
        boundaries are not ours: the fetcher compares epochs again). Raises
        CorruptRecordError, CorruptBatchError, StorageError; nothing is appended then."""
        plog = self.log
        appended = False
        if records:
            batches = list(scan_batches(records, verify_crc=False))
            headers = [h for _, h in batches]
            if headers and headers[0].base_offset != plog.log_end_offset:
                log.warning("%s-%d: the leader sent a batch at %d, our log ends at %d", *self.key,
                            headers[0].base_offset, plog.log_end_offset)
                return False
            if headers:
                plog.append(records, now_ms=now_ms, assign_offsets=False)
                for pos, header in batches:
                    if header.is_control:
                        marker = read_marker(records, pos)
                        if marker is not None:
                            self._marker_appended(header.producer_id, header.producer_epoch,
                                                  marker.commit, marker.coordinator_epoch,
                                                  header.base_offset)
                    else:
                        self.producers.record(header, header.base_offset)
                if self.producers.first_unstable_offset != plog.first_unstable_offset:
                    plog.first_unstable_offset = self.producers.first_unstable_offset
                appended = True
        moved = plog.set_high_watermark(leader_high_watermark)
        started = self.follow_log_start(leader_log_start_offset, now_ms=now_ms, publish=False)
        if appended or moved or started:
            self.publish()
        if appended or moved:
            self._context.waiters.notify(*self.key)
        return True

    def follow_log_start(self, leader_log_start: int, *, now_ms: int,
                         publish: bool = True) -> bool:
        """Move the log start up to the leader's (never past our high watermark), deleting
        the segments below it; True if it moved. A failure is logged, not raised: the next
        fetch response asks again."""
        plog = self.log
        before = plog.log_start_offset
        if leader_log_start <= before:
            return False
        try:
            deleted = plog.follow_log_start(leader_log_start, now_ms=now_ms)
        except StorageError as exc:
            log.error("%s-%d: cannot move the log start to the leader's %d: %s", *self.key,
                      leader_log_start, exc)
            return False
        if plog.log_start_offset == before:
            return False
        log.info("%s-%d: log start %d -> %d after the leader's: %d segment(s) deleted",
                 *self.key, before, plog.log_start_offset, deleted)
        if publish:
            self.publish()
        return True

    def truncate_to(self, offset: int, *, now_ms: int) -> None:
        """Cut the log at `offset` (KIP-101: where the leader's epochs say). Raises
        StorageError."""
        self.log.truncate_to(offset, now_ms=now_ms)
        self._truncated()

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """Empty the log and restart it at `offset` (our log ends below the leader's log
        start: nothing here continues it). Raises StorageError."""
        self.log.truncate_fully_and_start_at(offset, now_ms=now_ms)
        self._truncated()

    def _truncated(self) -> None:
        self.producers = self._replay(self.log)
        self.publish()

    def _replay(self, plog: PartitionLog) -> ProducerStates:
        """The producer state from the log (opened, or truncated), and recovery of the
        .txnindex files from the control batches: rewritten where missing or different (a
        crash, a truncation), removed where no abort is left."""
        producers = ProducerStates.of_log(plog)
        plog.first_unstable_offset = producers.first_unstable_offset
        try:
            changed = plog.reconcile_txn_index(producers.aborted_by_segment)
        except StorageError as exc:
            log.error("%s-%d: cannot rebuild the .txnindex files: %s", *self.key, exc)
        else:
            if changed:
                log.warning("%s-%d: %d .txnindex file(s) rebuilt from the log", *self.key,
                            changed)
        producers.aborted_by_segment = {}
        return producers

    # retention and the group coordinator's snapshots ---------------------------------------

    def apply_retention(self, *, now_ms: int) -> int:
        """Delete the segments retention lets go; returns how many. Raises StorageError."""
        deleted = self.log.apply_retention(now_ms=now_ms)
        if deleted:
            self.publish()
        return deleted

    def low_watermark(self) -> int:
        """Kafka's lowWatermarkIfLeader: the lowest log start among this replica and the
        followers on live nodes, as their fetches stated it (-1 while one has not)."""
        low = self.log.log_start_offset
        role = self.role
        if role is None or not role.leading:
            return low
        live = self._context.control.fleet_nodes or {}
        for replica in role.state.replicas:
            if replica != self._context.node_id and replica in live:
                low = min(low, role.follower_starts.get(replica, -1))
        return low

    def deleted_on_replicas(self, offset: int, timeout_ms: int) -> asyncio.Future:
        """A future of the ErrorCode once every live replica's log start reached `offset`
        (NONE), the wait timed out (REQUEST_TIMED_OUT) or the leadership ended
        (NOT_LEADER_OR_FOLLOWER): Kafka's DelayedDeleteRecords."""
        answer = asyncio.get_running_loop().create_future()
        if self.low_watermark() >= offset:
            answer.set_result(ErrorCode.NONE)
        else:
            self._deletions.add(offset - 1, answer, max(timeout_ms, 0) / 1000)
        return answer

    def delete_records_before(self, offset: int, *, now_ms: int) -> int:
        """Move the log start to `offset` (a snapshot made the rest redundant)."""
        deleted = self.log.delete_records_before(offset, now_ms=now_ms)
        self.publish()
        return deleted

    # roles (the manager applies the controller's decisions) -------------------------------

    def become_leader(self, state: PartitionLeadership, *, start_high_watermark: int | None):
        """Lead in `state.leader_epoch`. `start_high_watermark`: a replica just opened starts
        from its checkpointed high watermark (`checkpoints.py`)."""
        if start_high_watermark is not None:
            self._start_high_watermark(start_high_watermark)
        try:
            self.log.start_leader_epoch(state.leader_epoch)
        except StorageError as exc:
            log.error("%s-%d: cannot start leader epoch %d: %s", *self.key, state.leader_epoch,
                      exc)
        self.role = Role.of(state, self._context.node_id, now=time.monotonic())
        log.info("%s-%d: leader in epoch %d, log end %d, isr %s", *self.key, state.leader_epoch,
                 self.log.log_end_offset, list(state.isr))
        self.update_high_watermark()

    def become_follower(self, state: PartitionLeadership, *,
                        start_high_watermark: int | None) -> None:
        self._fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.log.hold_high_watermark = True
        if start_high_watermark is not None:
            self._start_high_watermark(start_high_watermark)
        self.role = Role.of(state, self._context.node_id, now=time.monotonic())
        if state.leader >= 0:
            log.info("%s-%d: follower of %d in epoch %d, log end %d", *self.key, state.leader,
                     state.leader_epoch, self.log.log_end_offset)

    def update_replicas(self, state: PartitionLeadership) -> None:
        """Same leader, same epoch: only the replicas and the ISR changed."""
        self.role.state = state
        if self.role.leading:
            self.update_high_watermark()

    def _fail_waiters(self, error: ErrorCode) -> None:
        self._acks.fail(error)
        self._deletions.fail(error)

    def answer_waiting_acks(self, error: ErrorCode) -> None:
        """Answer every acks=all append waiting here `error` (the worker stops)."""
        self._fail_waiters(error)

    def drop_role(self) -> None:
        """No longer replicated here (or no longer a replica): a single log again."""
        self._fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.role = None
        self.log.hold_high_watermark = False

    def _start_high_watermark(self, offset: int) -> None:
        """A replica just opened has its high watermark at its log end, which may hold
        records the fleet never committed (and may truncate): it starts from its checkpoint
        instead (or its log start), and its leader, or its followers, move it on."""
        self.log.reset_high_watermark(offset)
        self.publish()

    def close(self, *, delete: bool = False) -> None:
        """Waiting acks=all appends are answered NOT_LEADER_OR_FOLLOWER (retriable: their
        producers go to the next leader), then the log is closed (or deleted)."""
        self._fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if delete:
            self.log.delete()
        else:
            self.log.close()

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, role={self.role})"


def _resolved(error: ErrorCode) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(error)
    return future
