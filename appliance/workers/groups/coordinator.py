"""The group coordinator of one worker: the groups of the ``__consumer_offsets`` partitions it
leads, their committed offsets, and the log that makes both durable.

Placement follows Kafka: a group lives in partition ``partition_for(group_id)`` of the internal
topic, and the worker leading that partition coordinates it (``coordination.py`` decides which;
an appliance alone leads what it owns). The topic is created on first use, spread over the
workers (and, in cluster mode, replicated over ``offsets.topic.replication.factor``
appliances) like any topic, so groups spread over the fleet's cores and disks.

Leadership (``workers/coordinator_loads.py``, shared with the transaction coordinator): a
partition this worker starts leading is loaded from its log (COORDINATOR_LOAD_IN_PROGRESS
meanwhile), one it stops leading is unloaded at once (its members get NOT_COORDINATOR and find
the new coordinator); only a leader holds groups.

Writes: an OffsetCommit is one batch appended to the group's partition (stamped with the
leader epoch by the replication role) and answered once the worker's group commit has made it
durable and the partition's high watermark has passed it (acks=all; at once alone), so an
acknowledged commit survives a crash and the loss of the appliance. A commit that cannot be
committed gets Kafka's retriable errors (``coordination.commit_error``). Group generations
are appended too (not waited for). The in-memory state moves at append time, so a snapshot
taken while commits are still syncing includes them.

Time: a sweep every ``TICK_S`` follows leadership, expires sessions and ends join phases; it
also compacts partitions by snapshot (``compaction.py``) and writes the lag report.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable

from appliance.identity import NODES_PER_APPLIANCE
from appliance.workers.coordinator_loads import PartitionLoads
from appliance.workers.groups import offset_deletion
from appliance.workers.groups.compaction import Compaction
from appliance.workers.groups.coordination import (
    ALONE,
    NotEnoughAppliances,
    commit_error,
    coordinator_epoch,
    offsets_replication_factor,
)
from appliance.workers.groups.group import Group, GroupLimits
from appliance.workers.groups.lag import LagReport
from appliance.workers.groups.offsets_log import (
    OFFSETS_TOPIC,
    Committed,
    LoadedPartition,
    group_record,
    offset_record,
    partition_for,
    replay,
)
from appliance.workers.groups.pending import PendingOffsets
from appliance.workers.groups.state import GroupState
from appliance.workers.handler_context import HandlerContext
from appliance.workers.replication.partition import AppendOutcome
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch

log = logging.getLogger(__name__)

TICK_S = 0.1
LAG_REPORT_INTERVAL_S = 1.0
RECORDS_PER_BATCH = 2000


class CoordinatorError(Exception):
    def __init__(self, code: ErrorCode, message: str = ""):
        super().__init__(message or code.name)
        self.code = code


class GroupCoordinator:
    def __init__(self, worker: HandlerContext):
        self.worker = worker
        config = worker.config
        self.limits = GroupLimits(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size)
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], Committed]] = {}
        # commits appended here, not yet committed (replicated): OffsetFetch must not see them
        # (the commit may still fail, and a reader would see the offset go back), but a
        # snapshot restates them, as it replaces their records. Group -> partition -> (the
        # record's offset, the value) of the latest such commit.
        self.in_flight: dict[str, dict[tuple[str, int], tuple[int, Committed]]] = {}
        self.pending = PendingOffsets()  # transactional offsets waiting for their marker
        # the partitions of __consumer_offsets served here
        self.loads = PartitionLoads(worker, OFFSETS_TOPIC, epoch_of=self.epoch_of,
                                    new_state=LoadedPartition, replay=replay,
                                    install=self.install, uninstall=self.drop)
        self.compaction = Compaction(self)
        self.lag = LagReport()
        self._task: asyncio.Task | None = None

    # -- placement --------------------------------------------------------------------------

    def topic_configs(self) -> dict[str, str]:
        """The internal topic keeps everything until a snapshot makes it redundant."""
        return {"retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(self.worker.config.offsets_topic_segment_bytes)}

    def ensure_topic(self):
        controller = self.worker.control
        info = controller.topic(OFFSETS_TOPIC)
        if info is None:
            nodes = controller.fleet_nodes
            live = None if nodes is None else len({n // NODES_PER_APPLIANCE for n in nodes})
            try:
                factor = offsets_replication_factor(
                    self.worker.config.offsets_topic_replication_factor, live)
            except NotEnoughAppliances as exc:
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from None
            result = controller.create_topic(
                OFFSETS_TOPIC, self.worker.config.offsets_topic_num_partitions, factor,
                self.topic_configs())
            if result.error not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE, result.message)
            info = controller.topic(OFFSETS_TOPIC)
            if info is None:  # another appliance of the fleet made it; we have not heard yet
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"{OFFSETS_TOPIC} is not known here yet")
        return info

    def coordinator_partition(self, group_id: str):
        """The internal topic (created if needed) and the partition of it that holds
        ``group_id``: whoever leads that partition coordinates the group."""
        info = self.ensure_topic()
        return info, partition_for(group_id, info.partition_count)

    def epoch_of(self, info, partition: int) -> int | None:
        """The leader epoch in which this worker coordinates ``partition`` now, or None."""
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        return coordinator_epoch(info, partition, worker_index=self.worker.index,
                                 node_id=self.worker.node_id, held=held is not None,
                                 leading_epoch=None if held is None else held.leader_epoch)

    def _partition_here(self, group_id: str) -> int:
        info = self.worker.control.topic(OFFSETS_TOPIC)
        if info is None:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR)
        partition = partition_for(group_id, info.partition_count)
        if self.epoch_of(info, partition) is None:
            if partition in self.loads.loaded or partition in self.loads.loading:
                self.follow_leadership()  # it moved before we heard: let go now
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR)
        if partition in self.loads.loaded:
            return partition
        raise CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def group(self, group_id: str, *, create: bool) -> Group | None:
        """The group if this worker coordinates it (CoordinatorError otherwise); None when it
        does not exist and ``create`` is false."""
        if not group_id:
            raise CoordinatorError(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        self._partition_here(group_id)
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            if not create:
                return None
            group = self.groups[group_id] = self._new_group(group_id)
        return group

    def _new_group(self, group_id: str) -> Group:
        group = Group(group_id, self.limits)
        group.on_change = self._persist_group
        return group

    def check_session_timeout(self, timeout_ms: int) -> None:
        config = self.worker.config
        if not config.group_min_session_timeout_ms <= timeout_ms <= \
                config.group_max_session_timeout_ms:
            raise CoordinatorError(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {timeout_ms} ms is outside "
                f"[{config.group_min_session_timeout_ms}, {config.group_max_session_timeout_ms}]")

    # -- leadership (coordinator_loads.py) ----------------------------------------------------

    def follow_leadership(self) -> None:
        """Serve exactly the partitions this worker leads now (coordinator_loads.py)."""
        self.loads.follow()

    def install(self, partition: int, epoch: int, plog, state: LoadedPartition) -> None:
        """Serve a partition's groups as its log rebuilt them."""
        groups = state.build_groups(self.limits, self.worker.now_ms())
        for group_id, group in groups.items():
            group.on_change = self._persist_group
            self.groups[group_id] = group
            self.offsets[group_id] = state.offsets.get(group_id, {})
        self.pending.merge(state.pending)
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        if held is not None:  # from now on its markers move the pending offsets
            held.on_marker = functools.partial(self.marker_landed, partition)
        self.compaction.loaded(partition, plog.size_bytes)
        log.info("worker %d loaded %s-%d: %d group(s) from %d record(s)%s", self.worker.index,
                 OFFSETS_TOPIC, partition, len(groups), state.records,
                 "" if epoch == ALONE else f", leader epoch {epoch}")

    def drop(self, partition: int) -> None:
        """Forget a partition's groups (another node coordinates them now); members waiting
        in a join or sync are answered NOT_COORDINATOR."""
        self.compaction.forget(partition)
        info = self.worker.control.topic(OFFSETS_TOPIC)
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        if held is not None:
            held.on_marker = None
        mine = [g for g in self.groups.keys() | self.offsets.keys()
                if info is None or partition_for(g, info.partition_count) == partition]
        self.pending.drop_groups(lambda g: info is None
                                 or partition_for(g, info.partition_count) == partition)
        for group_id in mine:
            group = self.groups.pop(group_id, None)
            if group is not None and group.state is not GroupState.DEAD:
                group.on_change = lambda group: None
                group.kill()
            self.offsets.pop(group_id, None)
            self.in_flight.pop(group_id, None)
        log.info("worker %d unloaded %s-%d: %d group(s)", self.worker.index, OFFSETS_TOPIC,
                 partition, len(mine))

    def unload_all(self) -> None:
        """The internal topic was deleted: every group here is gone."""
        self.loads.unload_all()
        for group in self.groups.values():
            if group.state is not GroupState.DEAD:
                group.kill()
        self.groups.clear()
        self.offsets.clear()
        self.in_flight.clear()
        self.pending = PendingOffsets()

    # -- writing ----------------------------------------------------------------------------

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None):
        """Append records to our partition of the internal topic; returns the last offset.
        ``producer`` (id, epoch): in transactional batches of that producer (TxnOffsetCommit),
        which its marker commits or aborts; an older epoch than the partition knows raises
        INVALID_PRODUCER_EPOCH."""
        now_ms = self.worker.now_ms()
        last = -1
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        for start in range(0, len(records), RECORDS_PER_BATCH):
            chunk = [(now_ms, key, value, ()) for key, value in
                     records[start:start + RECORDS_PER_BATCH]]
            if producer is None or held is None:
                batch = build_batch(chunk, now_ms=now_ms)
            else:
                batch = build_batch(
                    chunk, now_ms=now_ms, producer_id=producer[0], producer_epoch=producer[1],
                    base_sequence=held.producers.next_sequence(*producer),
                    is_transactional=True)
            outcome = (held.append_as_leader(batch, now_ms=now_ms) if held is not None
                       else AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            if outcome.error == ErrorCode.INVALID_PRODUCER_EPOCH:
                raise CoordinatorError(outcome.error, "a newer epoch of the producer wrote")
            if outcome.error != ErrorCode.NONE:
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"cannot append to {OFFSETS_TOPIC}-{partition}: "
                                       f"{outcome.message or outcome.error.name}")
            last = outcome.last_offset
        return last

    async def durable(self, partition: int, last_offset: int) -> None:
        """Wait until ``last_offset`` is on disk here (a snapshot needs no more). Raises
        StorageError when the sync failed."""
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        waiting = self.worker.committer.durable(held.log, last_offset)
        if waiting is not None:
            await waiting

    async def _committed(self, partition: int, last_offset: int) -> None:
        """Durable here, then committed: the high watermark passed ``last_offset`` (every
        replica in the ISR has it; at once for a single copy). CoordinatorError otherwise."""
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        if held is None:  # moved away since the append
            raise CoordinatorError(commit_error(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        waiting = held.committed(last_offset, self.worker.config.offsets_commit_timeout_ms)
        error = ErrorCode.NONE if waiting is None else await waiting
        if error == ErrorCode.KAFKA_STORAGE_ERROR:  # the sync failed here
            raise CoordinatorError(error, f"{OFFSETS_TOPIC}-{partition}: fdatasync failed")
        if error != ErrorCode.NONE:
            raise CoordinatorError(commit_error(error),
                                   f"{OFFSETS_TOPIC}-{partition}: {error.name}")

    def _refuse_short_isr(self, partition: int) -> None:
        """acks=all's refusal before appending: fewer in-sync replicas than
        min.insync.replicas (the commit is retried once the ISR is back)."""
        held = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        refused = held.acks_all_refusal() if held is not None else None
        if refused is not None:
            raise CoordinatorError(commit_error(refused),
                                   f"{OFFSETS_TOPIC}-{partition}: {refused.name}")

    def _persist_group(self, group: Group) -> None:
        try:
            partition = self._partition_here(group.group_id)
            self.append(partition, [group_record(group)])
        except CoordinatorError as exc:
            log.error("cannot store group %r: %s", group.group_id, exc)

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], Committed]) -> None:
        """Store committed offsets durably and replicated; raises CoordinatorError (not
        acknowledged: stored nowhere, or not on enough replicas yet)."""
        partition = self._partition_here(group_id)
        self._refuse_short_isr(partition)
        records = [offset_record(group_id, topic, index, value)
                   for (topic, index), value in offsets.items()]
        last = self.append(partition, records)
        self.pending.supersede(group_id, offsets.keys())
        flying = self.in_flight.setdefault(group_id, {})
        for key, value in offsets.items():
            flying[key] = (last, value)
        if group_id not in self.groups:
            self.groups[group_id] = self._new_group(group_id)
        try:
            await self._committed(partition, last)
        except CoordinatorError as exc:
            log.warning("commit of group %r is not acknowledged: %s", group_id, exc)
            raise
        else:  # commits settle in the order of their records (the high watermark's)
            if group_id in self.in_flight:  # not unloaded or deleted meanwhile
                self.offsets.setdefault(group_id, {}).update(offsets)
        finally:
            self._landed_or_failed(group_id, offsets, last)

    def _landed_or_failed(self, group_id: str, offsets, last: int) -> None:
        flying = self.in_flight.get(group_id)
        if flying is None:
            return  # unloaded or deleted meanwhile
        for key in offsets:
            if flying.get(key, (None,))[0] == last:  # no later commit of it is in flight
                del flying[key]
        if not flying:
            del self.in_flight[group_id]

    def restated(self, group_id: str) -> dict[tuple[str, int], Committed]:
        """What a snapshot restates of a group's offsets: the committed ones, overlaid with
        the commits still in flight (their records are before the snapshot's, which replaces
        them)."""
        committed = self.offsets.get(group_id, {})
        flying = self.in_flight.get(group_id)
        if not flying:
            return committed
        return {**committed, **{key: value for key, (_, value) in flying.items()}}

    async def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                                   offsets: dict[tuple[str, int], Committed]) -> None:
        """TxnOffsetCommit: write the offsets in a transactional batch of the producer and
        hold them pending until its marker lands on the partition (``marker_landed``);
        acknowledged once replicated, as ``commit``. Raises CoordinatorError."""
        partition = self._partition_here(group_id)
        self._refuse_short_isr(partition)
        records = [offset_record(group_id, topic, index, value)
                   for (topic, index), value in offsets.items()]
        last = self.append(partition, records, (producer_id, producer_epoch))
        self.pending.add(producer_id, producer_epoch, group_id, offsets)
        if group_id not in self.groups:
            self.groups[group_id] = self._new_group(group_id)
        try:
            await self._committed(partition, last)
        except CoordinatorError as exc:
            log.warning("transactional commit of group %r (producer %d) is not acknowledged: "
                        "%s", group_id, producer_id, exc)
            raise

    def marker_landed(self, partition: int, producer_id: int, commit: bool,
                      offset: int) -> None:
        """``Partition.on_marker`` of a partition we serve: the producer's transaction ended
        there, so its pending offsets of the partition's groups are committed (COMMIT) or
        dropped (ABORT). A partition still loading reads the marker from its log instead."""
        if partition not in self.loads.loaded:
            return
        info = self.worker.control.topic(OFFSETS_TOPIC)
        if info is None:
            return
        count = info.partition_count
        done = self.pending.complete(producer_id,
                                     lambda g: partition_for(g, count) == partition)
        if not commit:
            return
        for group_id, offsets in done.items():
            self.offsets.setdefault(group_id, {}).update(offsets)
            if group_id not in self.groups:
                self.groups[group_id] = self._new_group(group_id)

    def committed(self, group_id: str) -> dict[tuple[str, int], Committed]:
        return self.offsets.get(group_id, {})

    def unstable(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with offsets pending in an open transaction."""
        return self.pending.keys_of(group_id) if self.pending else set()

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group; its offsets go with it."""
        try:
            partition = self._partition_here(group_id)
            self._refuse_short_isr(partition)
        except CoordinatorError as exc:
            return exc.code
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        group.kill()
        records = [offset_record(group_id, t, p, None) for t, p in self.committed(group_id)]
        records.append(group_record(group))
        last = self.append(partition, records)
        del self.groups[group_id]
        self.offsets.pop(group_id, None)
        self.in_flight.pop(group_id, None)
        self.pending.drop_groups(lambda g: g == group_id)
        try:
            await self._committed(partition, last)
        except CoordinatorError as exc:
            return exc.code
        return ErrorCode.NONE

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (offset_deletion.py says which may go): tombstones for the offsets
        that go, acknowledged once replicated. Returns (group error, answer per partition)."""
        try:
            partition = self._partition_here(group_id)
            self._refuse_short_isr(partition)
        except CoordinatorError as exc:
            return exc.code, {}
        group = self.groups.get(group_id)
        refused = offset_deletion.group_refusal(group)
        if refused is not None:
            return refused, {}
        committed = self.committed(group_id)
        answers, gone = offset_deletion.partition_answers(group, partitions, committed)
        if not gone:
            return ErrorCode.NONE, answers
        last = self.append(partition, [offset_record(group_id, t, p, None) for t, p in gone])
        for key in gone:
            committed.pop(key, None)
        try:
            await self._committed(partition, last)
        except CoordinatorError as exc:
            return exc.code, {}
        return ErrorCode.NONE, answers

    # -- time -------------------------------------------------------------------------------

    def start(self) -> None:
        """On the running loop, once replication has taken its roles: load what we lead."""
        self._task = asyncio.ensure_future(self._sweep())
        self.loads.running = True
        self.follow_leadership()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self.loads.stop()

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        next_report = loop.time()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.follow_leadership()
                self.tick(self.worker.now_ms())
                if loop.time() >= next_report:
                    next_report = loop.time() + LAG_REPORT_INTERVAL_S
                    self.lag.write(self.groups.values(), self.offsets,
                                   self.worker.high_watermark_of, self.worker.now_ms())
                await self.compaction.sweep(self.loads.loaded)
            except Exception:  # one bad sweep must not stop the next
                log.exception("group coordinator sweep failed")

    def tick(self, now_ms: int) -> None:
        for group_id, group in list(self.groups.items()):
            group.tick(now_ms)
            if group.state is GroupState.EMPTY and group.generation == 0 \
                    and not group.pending and not self.offsets.get(group_id) \
                    and group_id not in self.in_flight and not self.unstable(group_id):
                del self.groups[group_id]  # never used: nothing to remember

    # -- views ------------------------------------------------------------------------------

    def listed(self) -> Iterable[Group]:
        return [g for g in self.groups.values() if g.state is not GroupState.DEAD]
