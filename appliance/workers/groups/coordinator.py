"""The group coordinator of one worker: the groups of the ``__consumer_offsets`` partitions it
owns, their committed offsets, and the log that makes both durable.

Placement follows Kafka: a group lives in partition ``partition_for(group_id)`` of the internal
topic, and the worker owning that partition coordinates it. The topic is created on first
use, spread over the workers like any topic, so groups spread over the appliance's cores and
disks; a worker restarted after kill -9 owns the same partitions again and reloads them.

Writes: an OffsetCommit is one batch appended to the group's partition and answered after the
worker's group commit has made it durable, so an acknowledged commit survives a crash. Group
generations are appended too (not waited for). The in-memory state moves at append time, so
a snapshot taken while commits are still syncing includes them.

Time: a sweep every ``TICK_S`` expires sessions and ends join phases; it also snapshots a
partition whose log has grown well past its live state, and writes the lag report.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from appliance.segments.errors import StorageError
from appliance.workers.groups.group import Group, GroupLimits
from appliance.workers.groups.lag import LagReport
from appliance.workers.groups.offsets_log import (
    OFFSETS_TOPIC,
    Committed,
    LoadedPartition,
    group_record,
    offset_record,
    partition_for,
    snapshot_records,
)
from appliance.workers.groups.state import GroupState
from appliance.workers.handler_context import HandlerContext
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch, decode_batches

log = logging.getLogger(__name__)

TICK_S = 0.1
LAG_REPORT_INTERVAL_S = 1.0
LOAD_READ_BYTES = 1 << 20
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
        self.loaded: set[int] = set()  # partitions of __consumer_offsets served here
        self.lag = LagReport()
        self._snapshot_floor: dict[int, int] = {}  # partition -> log size right after a snapshot
        self._task: asyncio.Task | None = None

    # -- placement --------------------------------------------------------------------------

    def topic_configs(self) -> dict[str, str]:
        """The internal topic keeps everything until a snapshot makes it redundant."""
        return {"retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(self.worker.config.offsets_topic_segment_bytes)}

    def ensure_topic(self):
        controller = self.worker.controller
        info = controller.topic(OFFSETS_TOPIC)
        if info is None:
            # one replica until the coordinator's writes are replicated: extra replicas would
            # hold nothing and, once out of the ISR, never return to it
            result = controller.create_topic(
                OFFSETS_TOPIC, self.worker.config.offsets_topic_num_partitions, 1,
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

    def _partition_here(self, group_id: str) -> int:
        info = self.worker.controller.topic(OFFSETS_TOPIC)
        if info is None:
            raise CoordinatorError(ErrorCode.NOT_COORDINATOR)
        partition = partition_for(group_id, info.partition_count)
        if partition in self.loaded:
            return partition
        if info.owners[partition] == self.worker.index:
            raise CoordinatorError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        raise CoordinatorError(ErrorCode.NOT_COORDINATOR)

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

    # -- loading ----------------------------------------------------------------------------

    def load_owned(self) -> None:
        """Load every partition of the internal topic this worker owns and has not loaded."""
        info = self.worker.controller.topic(OFFSETS_TOPIC)
        if info is None:
            return
        for index, owner in enumerate(info.owners):
            owned = self.worker.partitions.get(OFFSETS_TOPIC, index)
            if owner == self.worker.index and owned is not None and index not in self.loaded:
                self._load(index, owned.log)

    def _load(self, index: int, plog) -> None:
        state = LoadedPartition()
        offset, end = plog.log_start_offset, plog.high_watermark
        count = 0
        while offset < end:
            piece = plog.read(offset, LOAD_READ_BYTES)
            if not piece:
                break
            for header, records in decode_batches(piece.read()):
                state.apply_all((r.key, r.value) for r in records if r.offset >= offset)
                count += len(records)
                offset = header.base_offset + header.last_offset_delta + 1
        groups = state.build_groups(self.limits, self.worker.now_ms())
        for group_id, group in groups.items():
            group.on_change = self._persist_group
            self.groups[group_id] = group
            self.offsets[group_id] = state.offsets.get(group_id, {})
        self.loaded.add(index)
        self._snapshot_floor[index] = plog.size_bytes
        log.info("worker %d loaded %s-%d: %d group(s) from %d record(s)", self.worker.index,
                 OFFSETS_TOPIC, index, len(groups), count)

    def unload_all(self) -> None:
        """The internal topic was deleted: every group here is gone."""
        for group in self.groups.values():
            if group.state is not GroupState.DEAD:
                group.kill()
        self.groups.clear()
        self.offsets.clear()
        self.loaded.clear()

    # -- writing ----------------------------------------------------------------------------

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]):
        """Append records to our partition of the internal topic; returns the last offset."""
        now_ms = self.worker.now_ms()
        last = -1
        for start in range(0, len(records), RECORDS_PER_BATCH):
            chunk = records[start:start + RECORDS_PER_BATCH]
            batch = build_batch([(now_ms, key, value, ()) for key, value in chunk],
                                now_ms=now_ms)
            outcome = self.worker.partitions.append(OFFSETS_TOPIC, partition, batch,
                                                    now_ms=now_ms)
            if outcome.error != ErrorCode.NONE:
                raise CoordinatorError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       f"cannot append to {OFFSETS_TOPIC}-{partition}: "
                                       f"{outcome.message or outcome.error.name}")
            last = outcome.last_offset
        return last

    async def _durable(self, partition: int, last_offset: int) -> None:
        owned = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        await asyncio.wrap_future(self.worker.committer.request(owned.log, last_offset))

    def _persist_group(self, group: Group) -> None:
        try:
            partition = self._partition_here(group.group_id)
            self._append(partition, [group_record(group)])
        except CoordinatorError as exc:
            log.error("cannot store group %r: %s", group.group_id, exc)

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], Committed]) -> None:
        """Store committed offsets durably; raises CoordinatorError (nothing stored)."""
        partition = self._partition_here(group_id)
        records = [offset_record(group_id, topic, index, value)
                   for (topic, index), value in offsets.items()]
        last = self._append(partition, records)
        self.offsets.setdefault(group_id, {}).update(offsets)
        if group_id not in self.groups:
            self.groups[group_id] = self._new_group(group_id)
        try:
            await self._durable(partition, last)
        except (StorageError, RuntimeError) as exc:  # a failed sync; a committer shut down
            log.error("commit of group %r is not durable: %s", group_id, exc)
            raise CoordinatorError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from exc

    def committed(self, group_id: str) -> dict[tuple[str, int], Committed]:
        return self.offsets.get(group_id, {})

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups: only an empty group; its offsets go with it."""
        try:
            partition = self._partition_here(group_id)
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
        last = self._append(partition, records)
        del self.groups[group_id]
        self.offsets.pop(group_id, None)
        await self._durable(partition, last)
        return ErrorCode.NONE

    # -- time -------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._sweep())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        next_report = loop.time()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.tick(self.worker.now_ms())
                if loop.time() >= next_report:
                    next_report = loop.time() + LAG_REPORT_INTERVAL_S
                    self.lag.write(self.groups.values(), self.offsets,
                                   self.worker.high_watermark_of, self.worker.now_ms())
                await self._maybe_snapshot()
            except Exception:  # one bad sweep must not stop the next
                log.exception("group coordinator sweep failed")

    def tick(self, now_ms: int) -> None:
        for group_id, group in list(self.groups.items()):
            group.tick(now_ms)
            if group.state is GroupState.EMPTY and group.generation == 0 \
                    and not group.pending and not self.offsets.get(group_id):
                del self.groups[group_id]  # never used: nothing to remember

    # -- compaction by snapshot ---------------------------------------------------------------

    async def _maybe_snapshot(self) -> None:
        segment_bytes = self.worker.config.offsets_topic_segment_bytes
        for partition in sorted(self.loaded):
            owned = self.worker.partitions.get(OFFSETS_TOPIC, partition)
            if owned is None:
                continue
            grown = owned.log.size_bytes - self._snapshot_floor.get(partition, 0)
            if grown >= segment_bytes:
                await self.snapshot(partition)

    async def snapshot(self, partition: int) -> None:
        """Restate the partition's live state in a fresh segment, make it durable, then drop
        everything before it: the log is compacted without rewriting a file."""
        owned = self.worker.partitions.get(OFFSETS_TOPIC, partition)
        plog = owned.log
        now_ms = self.worker.now_ms()
        plog.roll(now_ms=now_ms)
        start = plog.log_end_offset
        mine = [g for g in self.groups.values() if self._partition_of(g.group_id) == partition]
        offsets = {g.group_id: self.offsets.get(g.group_id, {}) for g in mine}
        records = list(snapshot_records(mine, offsets))
        if records:
            await self._durable(partition, self._append(partition, records))
        deleted = plog.delete_records_before(start, now_ms=self.worker.now_ms())
        self.worker.partitions.publish(owned)
        self._snapshot_floor[partition] = plog.size_bytes
        log.info("%s-%d: snapshot of %d record(s) at offset %d; %d old segment(s) deleted",
                 OFFSETS_TOPIC, partition, len(records), start, deleted)

    def _partition_of(self, group_id: str) -> int:
        info = self.worker.controller.topic(OFFSETS_TOPIC)
        return partition_for(group_id, info.partition_count)

    # -- views ------------------------------------------------------------------------------

    def listed(self) -> Iterable[Group]:
        return [g for g in self.groups.values() if g.state is not GroupState.DEAD]
