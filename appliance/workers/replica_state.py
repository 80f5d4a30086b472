"""A worker's replicas in cluster mode: which it leads, which it follows, and the leader's books.

The fleet's controller decides leadership (`TopicInfo.leadership`: leader, leader epoch,
replicas, ISR per partition); `Replication.apply` follows each decision for the replicas this
worker holds:

- **Leader**: appends carry its leader epoch (stamped into every batch, and opening an entry
  of the leader-epoch cache at the log end). It keeps each follower's log end offset as the
  follower's fetches state it, and the high watermark is the lowest log end offset in the
  ISR (its own included; a follower of the ISR that has not fetched yet from this leader
  holds it still). With the leader alone in the ISR, the high watermark follows the log end,
  as a single copy's does. acks=all waits (`wait_committed`) until the high watermark passes
  the batch; while the ISR is smaller than `min.insync.replicas`, acks=all is refused.
  A live replica out of the ISR that has caught up to the high watermark is added back: the
  leader asks its supervisor (`Controller.alter_isr`), which writes the partition state in
  ZooKeeper with a conditional set.
- **Follower**: a `ReplicaFetcher` per leader node (replica_fetcher.py) truncates the log by
  the leader's OffsetForLeaderEpoch answer, then copies the leader's batches as they are; its
  high watermark is the leader's, as the fetch responses carry it.

Internal topics (`__consumer_offsets`) get roles like any topic: the group coordinator is
their writer, on the leader only (it follows these roles: groups/loading.py), and waits for
`wait_committed` as acks=all does. Replicas of a single-copy partition (replication factor 1),
and every partition of an appliance without ZooKeeper, never get a role here: they behave as
before.

Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from appliance.controller.channel import AlterPartition
from appliance.controller.topics import TopicInfo
from appliance.segments.errors import StorageError
from appliance.workers import hw_checkpoint
from appliance.workers.producer_state import ProducerStates
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

ISR_RETRY_S = 1.0  # an ISR change that failed or is still in flight is asked again after this
CHECKPOINT_INTERVAL_S = 5.0  # Kafka's replica.high.watermark.checkpoint.interval.ms


@dataclass
class Role:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leading: bool
    follower_ends: dict[int, int] = field(default_factory=dict)  # leader only: node -> LEO
    # leader only: when each follower last caught up, i.e. fetched at the leader's log end as
    # it was when the follower's previous fetch was read (Kafka's lastCaughtUpTime)
    caught_up_at: dict[int, float] = field(default_factory=dict)
    end_at_last_fetch: dict[int, int] = field(default_factory=dict)
    isr_asked_at: float = 0.0  # monotonic time of the last ISR change asked for
    isr_pending: bool = False  # an ISR change asked for and not answered yet


class Replication:
    def __init__(self, worker):
        self.worker = worker
        self.roles: dict[tuple[str, int], Role] = {}
        self._committed_waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future]]] = {}
        self.fetchers: dict[int, object] = {}  # leader node id -> ReplicaFetcher
        self.started = False
        self._lag_task: asyncio.Future | None = None
        self._checkpoint_task: asyncio.Future | None = None
        # the high watermarks this log dir's replicas had when last written (hw_checkpoint.py)
        self._checkpointed = hw_checkpoint.read(worker.log_dir)
        self._written = dict(self._checkpointed)

    def start(self) -> None:
        """On the running loop (fetchers are tasks): take the roles of every topic known."""
        self.started = True
        for info in self.worker.controller.topics():
            self.apply(info)
        self._lag_task = asyncio.ensure_future(self._watch_lag())
        self._checkpoint_task = asyncio.ensure_future(self._checkpoint_loop())

    @property
    def node_id(self) -> int:
        return self.worker.node_id

    # following the controller ------------------------------------------------------------

    def apply(self, info: TopicInfo) -> None:
        """Take the roles the controller's partition states give this worker's replicas."""
        if info.leadership is None or not self.started:
            return
        for index, state in enumerate(info.leadership):
            key = (info.name, index)
            owned = self.worker.partitions.get(info.name, index)
            if owned is None or len(state.replicas) < 2 or self.node_id not in state.replicas:
                self._drop(key)
                continue
            old = self.roles.get(key)
            if state.leader == self.node_id:
                if old is None or not old.leading or old.leader_epoch != state.leader_epoch:
                    self._become_leader(key, owned, state, first=old is None)
                else:
                    old.replicas, old.isr = state.replicas, state.isr
                    self._update_leader(key, owned, old)
            else:
                if (old is None or old.leading or old.leader != state.leader
                        or old.leader_epoch != state.leader_epoch):
                    self._become_follower(key, owned, state, first=old is None)
                else:
                    old.replicas, old.isr = state.replicas, state.isr

    def forget_topic(self, name: str) -> None:
        for key in [k for k in self.roles if k[0] == name]:
            self._drop(key)
        for key in [k for k in self._checkpointed if k[0] == name]:
            del self._checkpointed[key]

    def _drop(self, key) -> None:
        role = self.roles.pop(key, None)
        if role is None:
            return
        self._fail_waiters(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._unfollow(key)
        owned = self.worker.partitions.get(*key)
        if owned is not None:
            owned.leader_epoch = None
            owned.log.hold_high_watermark = False

    def _become_leader(self, key, owned, state, *, first: bool) -> None:
        self._unfollow(key)
        if first:
            self._start_high_watermark(key, owned)
        try:
            owned.log.start_leader_epoch(state.leader_epoch)
        except StorageError as exc:
            log.error("%s-%d: cannot start leader epoch %d: %s", *key, state.leader_epoch, exc)
        owned.leader_epoch = state.leader_epoch
        role = Role(state.leader, state.leader_epoch, state.replicas, state.isr, True)
        now = time.monotonic()  # every follower gets a full lag period from a new leader
        role.caught_up_at = {r: now for r in state.replicas}
        self.roles[key] = role
        log.info("%s-%d: leader in epoch %d, log end %d, isr %s", *key, state.leader_epoch,
                 owned.log.log_end_offset, list(state.isr))
        self._update_leader(key, owned, role)

    def _become_follower(self, key, owned, state, *, first: bool) -> None:
        self._fail_waiters(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._unfollow(key)
        owned.leader_epoch = None
        owned.log.hold_high_watermark = True
        if first:
            self._start_high_watermark(key, owned)
        self.roles[key] = Role(state.leader, state.leader_epoch, state.replicas, state.isr,
                               False)
        if state.leader < 0:
            return  # offline: nothing to follow until the controller elects a leader
        log.info("%s-%d: follower of %d in epoch %d, log end %d", *key, state.leader,
                 state.leader_epoch, owned.log.log_end_offset)
        from appliance.workers.replica_fetcher import ReplicaFetcher  # (a cycle otherwise)
        fetcher = self.fetchers.get(state.leader)
        if fetcher is None:
            fetcher = self.fetchers[state.leader] = ReplicaFetcher(self, state.leader)
        fetcher.add(key, state.leader_epoch)

    def _start_high_watermark(self, key, owned) -> None:
        """A replica just opened has its high watermark at its log end, which may hold
        records the fleet never committed (and may truncate): it starts from its checkpoint
        instead (or its log start), and its leader, or its followers, move it on."""
        checkpointed = self._checkpointed.pop(key, owned.log.log_start_offset)
        owned.log.reset_high_watermark(checkpointed)
        self.worker.partitions.publish(owned)

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write the replicas' high watermarks (hw_checkpoint.py) if any changed."""
        entries = dict(self._checkpointed)  # replicas not reopened yet keep theirs
        for key in self.roles:
            owned = self.worker.partitions.get(*key)
            if owned is not None and not owned.log.closed:
                entries[key] = owned.log.high_watermark
        if entries == self._written:
            return
        try:
            hw_checkpoint.write(self.worker.log_dir, entries)
            self._written = entries
        except OSError as exc:
            log.error("cannot write the high-watermark checkpoint of %s: %s",
                      self.worker.log_dir, exc)

    def _unfollow(self, key) -> None:
        for leader, fetcher in list(self.fetchers.items()):
            fetcher.remove(key)
            if fetcher.idle:
                fetcher.stop()
                del self.fetchers[leader]

    def stop(self) -> None:
        """The worker stops: acks=all requests still waiting are answered
        NOT_LEADER_OR_FOLLOWER (retriable: their producers go to the next leader) instead of
        losing their connection with no answer."""
        self.started = False
        for key in list(self._committed_waiters):
            self._fail_waiters(key, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for task in (self._lag_task, self._checkpoint_task):
            if task is not None:
                task.cancel()
        self.checkpoint()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()

    # the leader's side -------------------------------------------------------------------

    def leader_epoch(self, topic: str, index: int) -> int | None:
        role = self.roles.get((topic, index))
        return role.leader_epoch if role is not None else None

    def acks_all_refusal(self, topic: str, index: int) -> ErrorCode | None:
        """NOT_ENOUGH_REPLICAS while the ISR is smaller than min.insync.replicas."""
        role = self.roles.get((topic, index))
        owned = self.worker.partitions.get(topic, index)
        if role is None or not role.leading or owned is None:
            return None
        if len(role.isr) < owned.log.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return None

    def replica_read(self, replica_id: int, topic: str, index: int, fetch_offset: int,
                     current_leader_epoch: int = -1):
        """A follower's fetch at `fetch_offset`: its log end is that now. Returns the read
        function (up to the log end) or an ErrorCode. A follower that names another leader
        epoch than ours (KIP-320) is refused: an older one has not truncated for this epoch
        yet (FENCED_LEADER_EPOCH), a newer one means we have not heard of it yet
        (UNKNOWN_LEADER_EPOCH); either way it must not copy from this log now."""
        key = (topic, index)
        role = self.roles.get(key)
        owned = self.worker.partitions.get(topic, index)
        if role is None or not role.leading or owned is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if replica_id not in role.replicas:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if 0 <= current_leader_epoch < role.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > role.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if fetch_offset <= owned.log.log_end_offset:
            role.follower_ends[replica_id] = fetch_offset
            end = owned.log.log_end_offset
            if fetch_offset >= min(end, role.end_at_last_fetch.get(replica_id, end)):
                role.caught_up_at[replica_id] = time.monotonic()
            role.end_at_last_fetch[replica_id] = end
            self._update_leader(key, owned, role)
            if (replica_id not in role.isr and fetch_offset >= owned.log.high_watermark
                    and replica_id in (self.worker.controller.fleet_nodes or {})):
                # caught up, and live as the fleet sees it (or the controller, which drops
                # dead nodes from the ISR, would drop it again)
                self._ask_isr(key, role, tuple(role.isr) + (replica_id,))
        return owned.log.read_replica

    def _update_leader(self, key, owned, role: Role) -> None:
        """Recompute the high watermark from the ISR's log ends; wake what it releases."""
        plog = owned.log
        others = [r for r in role.isr if r != self.node_id]
        plog.hold_high_watermark = bool(others)
        ends = [plog.log_end_offset]
        for replica in others:
            end = role.follower_ends.get(replica)
            if end is None:
                ends = None
                break
            ends.append(end)
        moved = ends is not None and plog.set_high_watermark(min(ends))
        if moved:
            self.worker.partitions.publish(owned)
            self.worker.waiters.notify_readers(*key)  # followers' fetches wait for batches
        self._release(key, plog.high_watermark)

    async def _watch_lag(self) -> None:
        """Shrink the ISR of a partition this worker leads when a follower in it has not
        caught up with the log end for `replica.lag.time.max.ms` (Kafka's rule): a live but
        stalled or partitioned follower must not hold the high watermark, and so every
        acks=all producer, for longer than that. Dead nodes are the controller's to drop."""
        while True:
            lag_s = self.worker.config.replica_lag_time_max_ms / 1000
            await asyncio.sleep(min(max(lag_s / 4, 0.05), 1.0))
            now = time.monotonic()
            for key, role in list(self.roles.items()):
                if not role.leading:
                    continue
                lagging = [r for r in role.isr if r != self.node_id
                           and now - role.caught_up_at.get(r, now) > lag_s]
                if lagging:
                    log.warning("%s-%d: %s not caught up for %.1f s: leaving the ISR", *key,
                                lagging, lag_s)
                    self._ask_isr(key, role, tuple(r for r in role.isr if r not in lagging))

    def _ask_isr(self, key, role: Role, isr: tuple[int, ...]) -> None:
        """Ask the supervisor for an ISR change without waiting for it (a ZooKeeper write):
        one at a time per partition, again after ISR_RETRY_S if it did not happen. Waiting
        blocked this worker's loop for every change, so followers' fetches went unserved,
        fell behind and left the ISR in turn: after a restart, ISRs flapped for minutes."""
        now = time.monotonic()
        if role.isr_pending or now - role.isr_asked_at < ISR_RETRY_S:
            return
        role.isr_asked_at = now
        role.isr_pending = True
        loop = asyncio.get_running_loop()
        epoch, before = role.leader_epoch, role.isr
        try:
            self.worker.controller.alter_partition(
                AlterPartition(key[0], key[1], epoch, isr),
                lambda error: loop.call_soon(self._isr_answered, key, role, epoch, before, isr,
                                             error))
        except Exception as exc:  # noqa: BLE001 - the control channel; retried later
            role.isr_pending = False
            log.warning("%s-%d: ISR change to %s failed: %s", *key, list(isr), exc)

    def _isr_answered(self, key, asked: Role, leader_epoch: int, before: tuple[int, ...],
                      isr: tuple[int, ...], error: ErrorCode) -> None:
        asked.isr_pending = False
        log.info("%s-%d: ISR -> %s: %s", *key, list(isr), error.name)
        role = self.roles.get(key)
        owned = self.worker.partitions.get(*key)
        if (error == ErrorCode.NONE and role is not None and role.leading
                and role.leader_epoch == leader_epoch and owned is not None):
            # written behind our leader epoch: ours now, before the fleet's broadcast says so
            # (which may also have come first: the change is counted from the ISR it was
            # asked from, not from role.isr)
            self.worker.statistics.isr_changed(len(before), len(isr))
            role.isr = tuple(isr)
            self._update_leader(key, owned, role)

    # acks=all ----------------------------------------------------------------------------

    async def wait_committed(self, topic: str, index: int, last_offset: int,
                             timeout_s: float) -> ErrorCode:
        """NONE once the high watermark passes `last_offset`; NOT_LEADER_OR_FOLLOWER if this
        replica stops leading first; REQUEST_TIMED_OUT after `timeout_s`."""
        key = (topic, index)
        owned = self.worker.partitions.get(topic, index)
        role = self.roles.get(key)
        if owned is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if owned.log.high_watermark > last_offset:
            return ErrorCode.NONE
        if role is None or not role.leading:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        future = asyncio.get_running_loop().create_future()
        self._committed_waiters.setdefault(key, []).append((last_offset, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    def _release(self, key, high_watermark: int) -> None:
        """Answer the acks=all appends the high watermark now covers. Committed with fewer
        replicas in sync than min.insync.replicas (the ISR shrank while they waited), they
        get Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND: kept, but not as durable as asked."""
        waiting = self._committed_waiters.get(key)
        if not waiting:
            return
        role, owned = self.roles.get(key), self.worker.partitions.get(*key)
        short = (role is not None and owned is not None
                 and len(role.isr) < owned.log.config.min_insync_replicas)
        answer = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND if short else ErrorCode.NONE
        keep = []
        for offset, future in waiting:
            if future.done():
                continue
            if offset < high_watermark:
                future.set_result(answer)
            else:
                keep.append((offset, future))
        if keep:
            self._committed_waiters[key] = keep
        else:
            del self._committed_waiters[key]

    def _fail_waiters(self, key, error: ErrorCode) -> None:
        for _, future in self._committed_waiters.pop(key, []):
            if not future.done():
                future.set_result(error)

    # the follower's side (called by the fetchers) ----------------------------------------

    def following(self, key, leader: int, leader_epoch: int):
        """The owned partition if this worker still follows `leader` in `leader_epoch`."""
        role = self.roles.get(key)
        if role is None or role.leading or role.leader != leader:
            return None
        if role.leader_epoch != leader_epoch:
            return None
        return self.worker.partitions.get(*key)

    def appended(self, key, owned, headers) -> None:
        """A follower appended the leader's batches: producers, publication, waiters."""
        for header in headers:
            owned.producers.record(header, header.base_offset)
        self.worker.partitions.publish(owned)
        self.worker.waiters.notify(*key)

    def set_follower_high_watermark(self, key, owned, high_watermark: int) -> None:
        if owned.log.set_high_watermark(high_watermark):
            self.worker.partitions.publish(owned)
            self.worker.waiters.notify(*key)

    def truncated(self, key, owned) -> None:
        """After a truncation: the producers as the remaining batches say."""
        producers = ProducerStates()
        for _, header in owned.log.iter_batch_headers():
            producers.record(header, header.base_offset)
        owned.producers = producers
        self.worker.partitions.publish(owned)
