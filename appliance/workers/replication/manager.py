"""The replica manager: follows the controller's decisions for the replicas this worker holds.

The fleet's controller decides leadership (`TopicInfo.leadership`: leader, leader epoch,
replicas, ISR per partition); `apply` gives each `Partition` here the role a decision names,
and starts or stops following its leader (a `ReplicaFetcher` per leader node, `fetcher.py`).
Besides that it asks the ISR changes its leaders want (Kafka's AlterPartition, through the
supervisor: one at a time per partition, retried, never waited for on the loop), shrinks the
ISR of followers that stopped catching up for `replica.lag.time.max.ms`, and keeps the
replicas' high watermarks across restarts (`checkpoints.py`).

Internal topics (`__consumer_offsets`) get roles like any topic: the group coordinator is
their writer, on the leader only. Replicas of a single-copy partition (replication factor 1),
and every partition of an appliance without ZooKeeper, never get a role: they behave as
before.

Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time

from appliance.control.channel import AlterPartition
from appliance.control.topics import TopicInfo
from appliance.segments.config import LogConfig
from appliance.workers.replication import checkpoints
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.fetcher import ReplicaFetcher
from appliance.workers.replication.partition import Partition
from appliance.workers.replication.replicas import LocalReplicas
from appliance.workers.replication.throttle import FollowerThrottle
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

ISR_RETRY_S = 1.0  # an ISR change that failed or is still in flight is asked again after this
CHECKPOINT_INTERVAL_S = 5.0  # Kafka's replica.high.watermark.checkpoint.interval.ms


class ReplicaManager:
    def __init__(self, context: ReplicaContext, defaults: LogConfig):
        self.context = context
        self.replicas = LocalReplicas(context, defaults, ask_isr=self.ask_isr)
        self.node_id = context.node_id
        self.fetch_settings = context.fetch  # replica.fetch.* (fetch_settings.py)
        self.throttle = FollowerThrottle(context.control, context.node_id, self.in_sync)
        self.fetchers: dict[int, ReplicaFetcher] = {}  # leader node id -> its fetcher
        self.started = False
        self._tasks: list[asyncio.Future] = []
        # the high watermarks this log dir's replicas had when last written (checkpoints.py)
        self._checkpointed = checkpoints.read(context.log_dir)
        self._written = dict(self._checkpointed)

    def start(self) -> None:
        """On the running loop (fetchers are tasks): take the roles of every topic known."""
        self.started = True
        for info in self.context.control.topics():
            self.apply(info)
        self._tasks = [asyncio.ensure_future(self._watch_lag()),
                       asyncio.ensure_future(self._checkpoint_loop())]

    def stop(self) -> None:
        """The worker stops: acks=all requests still waiting are answered
        NOT_LEADER_OR_FOLLOWER (retriable: their producers go to the next leader) instead of
        losing their connection with no answer."""
        self.started = False
        for partition in self.replicas:
            partition.answer_waiting_acks(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for task in self._tasks:
            task.cancel()
        self.checkpoint()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()

    # following the controller ------------------------------------------------------------

    def apply(self, info: TopicInfo, indexes: tuple[int, ...] | None = None) -> None:
        """Take the roles the controller's partition states give this worker's replicas
        (`indexes`: only those partitions changed)."""
        if info.leadership is None or not self.started:
            return
        for index in range(len(info.leadership)) if indexes is None else indexes:
            state = info.leadership[index]
            partition = self.replicas.get(info.name, index)
            if partition is None:
                continue
            if len(state.replicas) < 2 or self.node_id not in state.replicas:
                self._drop(partition)
                continue
            old = partition.role
            if old is not None and old.same_term(state, self.node_id):
                partition.update_replicas(state)
                continue
            start = self._start_high_watermark(partition) if old is None else None
            self._unfollow(partition.key)
            if state.leader == self.node_id:
                partition.become_leader(state, start_high_watermark=start)
            else:
                partition.become_follower(state, start_high_watermark=start)
                if state.leader >= 0:  # offline: nothing to follow until a leader is elected
                    self._follow(partition.key, state.leader, state.leader_epoch)

    def forget_topic(self, name: str) -> None:
        for partition in self.replicas:
            if partition.topic == name:
                self._drop(partition)
        for key in [k for k in self._checkpointed if k[0] == name]:
            del self._checkpointed[key]

    def _drop(self, partition: Partition) -> None:
        if partition.role is None:
            return
        partition.drop_role()
        self._unfollow(partition.key)

    def _start_high_watermark(self, partition: Partition) -> int:
        return self._checkpointed.pop(partition.key, partition.log.log_start_offset)

    def in_sync(self, key) -> bool:
        """Whether this worker's replica of `key` is in its ISR (a throttle spares it)."""
        partition = self.replicas.get(*key)
        role = partition.role if partition is not None else None
        return role is not None and self.node_id in role.state.isr

    # the fetchers ------------------------------------------------------------------------

    def _follow(self, key, leader: int, leader_epoch: int) -> None:
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
        fetcher.add(key, leader_epoch)

    def _unfollow(self, key) -> None:
        for leader, fetcher in list(self.fetchers.items()):
            fetcher.remove(key)
            if fetcher.idle:
                fetcher.stop()
                del self.fetchers[leader]

    def following(self, key, leader: int, leader_epoch: int) -> Partition | None:
        """The partition if this worker still follows `leader` in `leader_epoch` for it."""
        partition = self.replicas.get(*key)
        role = partition.role if partition is not None else None
        if role is None or role.leading or role.state.leader != leader:
            return None
        return partition if role.state.leader_epoch == leader_epoch else None

    def now_ms(self) -> int:
        return self.context.now_ms()

    def leader_address(self, leader: int) -> tuple[str, int] | None:
        """The leader's endpoint of the inter-broker listener (None: not live, or it has no
        such listener)."""
        node = (self.context.control.fleet_nodes or {}).get(leader)
        node = None if node is None else node.on(self.context.link_security.listener)
        return None if node is None else (node.host, node.port)

    @property
    def link_security(self):
        return self.context.link_security

    # the ISR -----------------------------------------------------------------------------

    def ask_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Ask the supervisor for an ISR change without waiting for it (a ZooKeeper write):
        one at a time per partition, again after ISR_RETRY_S if it did not happen. Waiting
        blocked this worker's loop for every change, so followers' fetches went unserved,
        fell behind and left the ISR in turn: after a restart, ISRs flapped for minutes."""
        role = partition.role
        if not role.ask_isr(tuple(isr), time.monotonic(), ISR_RETRY_S):
            return
        loop = asyncio.get_running_loop()
        request = AlterPartition(partition.topic, partition.index, role.state.leader_epoch,
                                 tuple(isr))
        before = role.state.isr
        try:
            self.context.control.alter_partition(
                request, lambda error: loop.call_soon(self._isr_answered, partition, role,
                                                      request, before, error))
        except Exception as exc:  # noqa: BLE001 - the control channel; retried later
            role.isr_answered()
            partition.update_high_watermark()
            log.warning("%s-%d: ISR change to %s failed: %s", *partition.key, list(isr), exc)

    def _isr_answered(self, partition: Partition, asked, request: AlterPartition,
                      before: tuple[int, ...], error: ErrorCode) -> None:
        asked.isr_answered()
        log.info("%s-%d: ISR -> %s: %s", *partition.key, list(request.isr), error.name)
        if (error == ErrorCode.NONE and self.replicas.get(*partition.key) is partition
                and partition.isr_written(request.leader_epoch, request.isr)):
            # counted from the ISR it was asked from, not from the role's: the fleet's
            # broadcast of the same change may have come first
            self.context.statistics.isr_changed(len(before), len(request.isr))
        elif partition.role is asked and asked.leading:
            partition.update_high_watermark()  # refused: the written ISR alone counts again

    async def _watch_lag(self) -> None:
        """Shrink the ISR of a partition this worker leads when a follower in it has not
        caught up with the log end for `replica.lag.time.max.ms` (Kafka's rule): a live but
        stalled or partitioned follower must not hold the high watermark, and so every
        acks=all producer, for longer than that. Dead nodes are the controller's to drop."""
        lag_s = self.context.replica_lag_time_max_ms / 1000
        while True:
            await asyncio.sleep(min(max(lag_s / 4, 0.05), 1.0))
            now = time.monotonic()
            for partition in self.replicas:
                lagging = partition.lagging_followers(now, lag_s)
                if lagging:
                    log.warning("%s-%d: %s not caught up for %.1f s: leaving the ISR",
                                *partition.key, lagging, lag_s)
                    self.ask_isr(partition, tuple(r for r in partition.role.state.isr
                                                  if r not in lagging))

    # checkpoints -------------------------------------------------------------------------

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write the replicas' high watermarks (checkpoints.py) if any changed."""
        entries = dict(self._checkpointed)  # replicas not reopened yet keep theirs
        for partition in self.replicas:
            if partition.role is not None and not partition.log.closed:
                entries[partition.key] = partition.log.high_watermark
        if entries == self._written:
            return
        try:
            checkpoints.write(self.context.log_dir, entries)
            self._written = entries
        except OSError as exc:
            log.error("cannot write the high-watermark checkpoint of %s: %s",
                      self.context.log_dir, exc)

    # statistics --------------------------------------------------------------------------

    def follower_lags(self) -> list[list]:
        """[topic, partition, follower node, lag] for every follower of the partitions this
        worker leads: the leader's log end minus the follower's log end as its last fetch
        stated it. The leader's view, not the follower's own: a follower that is stalled,
        partitioned or dead cannot report its lag, while its leader sees it grow. A follower
        that has not fetched from this leader yet is left out until it does (its replica is
        then missing from the ISR, which `klog_under_replicated_partitions` counts)."""
        out = []
        for partition in self.replicas:
            role = partition.role
            if role is None or not role.leading:
                continue
            end = partition.log.log_end_offset
            for follower, follower_end in list(role.follower_ends.items()):
                out.append([partition.topic, partition.index, follower,
                            max(end - follower_end, 0)])
        return out
