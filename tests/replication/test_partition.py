"""The `Partition` alone, without ZooKeeper or a fleet: real logs, a real group commit and
real fetch waiters, driven through its methods as the handlers and the fetchers drive them.

Leader: appends, idempotent retries, acks=all's one future (the fdatasync, then the high
watermark moved by followers' fetches), NOT_ENOUGH_REPLICAS before and after an append, a
timeout, the refusals of a follower's fetch (KIP-320), an ISR expansion asked, and the
high watermark it holds while asked (KIP-497's maximal ISR, through the real manager). Follower:
the leader's batches appended as they are with its high watermark and log start, a diverged
batch refused, truncation and the producer state it rebuilds. Each operation's bookkeeping:
the shm publication and the waiters it wakes.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from appliance.control.topics import FleetNode, PartitionLeadership, TopicInfo
from appliance.segments import LogConfig, PartitionLog
from appliance.segments.group_commit import GroupCommitter
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.manager import ReplicaManager
from appliance.workers.replication.partition import Partition
from appliance.workers.replication.waiters import AppendWaiters
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import read_header
from klog.protocol.records import build_batch

ME, PEER, OTHER = 100, 200, 300
TOPIC = "orders"


class Publications:
    """Counts what a partition publishes to shm (the region's own tests cover the region)."""

    def __init__(self):
        self.count = 0

    def attach_point(self, topic, index):
        return None

    def start(self, topic, index, plog):
        return "slot"

    def publish(self, publication, plog, records_in=0, bytes_in=0):
        assert publication == "slot"
        self.count += 1


class Control:
    """The fleet as the partition sees it: the live nodes."""

    fleet_nodes = {n: FleetNode(n, "127.0.0.1", 9092) for n in (ME, PEER, OTHER)}


def batch(n=1, *, producer_id=-1, sequence=-1, base_offset=0, epoch=-1):
    return build_batch([(1_000, None, b"v%d" % i, ()) for i in range(n)], base_offset=base_offset,
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=sequence, partition_leader_epoch=epoch)


@pytest.fixture
def make(tmp_path):
    """make(min_insync=1) -> (partition, asked ISR changes, publications); everything closed
    after the test."""
    made = []
    committer = GroupCommitter()

    def build(*, min_insync: int = 1, name: str = "p"):
        asked = []
        publications = Publications()
        context = ReplicaContext(node_id=ME, worker_index=0, log_dir=tmp_path, control=Control(),
                                 publisher=publications, waiters=AppendWaiters(),
                                 committer=committer)
        plog = PartitionLog.open(str(tmp_path / name), LogConfig(
            segment_bytes=1 << 20, min_insync_replicas=min_insync), now_ms=0)
        partition = Partition(TOPIC, 0, plog, context,
                              ask_isr=lambda p, isr: asked.append(isr))
        made.append(partition)
        return partition, asked, publications

    yield build
    for partition in made:
        partition.close()
    committer.close()


def lead(partition, isr=(ME, PEER), epoch=5, start=None):
    partition.become_leader(PartitionLeadership(ME, epoch, (ME, PEER, OTHER), tuple(isr)),
                            start_high_watermark=start)


def stored(partition) -> bytes:
    """The log's bytes from its start, past the high watermark."""
    piece = partition.log.read_replica(partition.log_start_offset, 1 << 20)
    return os.pread(piece.fd, piece.length, piece.position)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 20))


def test_a_single_copy_appends_publishes_and_wakes_its_readers(make):
    async def scenario():
        partition, _, publications = make()
        woken = asyncio.ensure_future(partition._context.waiters.wait([partition.key], 5))
        await asyncio.sleep(0)
        outcome = partition.append_as_leader(batch(3), now_ms=0)
        assert (outcome.error, outcome.base_offset, outcome.last_offset) == (ErrorCode.NONE, 0, 2)
        assert outcome.committed is None  # acks=1: nothing to wait for
        assert await woken and publications.count == 1  # the append, published
        assert partition.high_watermark == 3  # a single copy: the log end
        durable = partition.append_as_leader(batch(), now_ms=0, required_acks=-1)
        assert await durable.committed == ErrorCode.NONE
        assert partition.log.recovery_point > durable.last_offset
    run(scenario())


def test_a_retried_idempotent_batch_is_acknowledged_with_its_first_offsets(make):
    async def scenario():
        partition, _, _ = make()
        first = partition.append_as_leader(batch(2, producer_id=7, sequence=0), now_ms=0)
        again = partition.append_as_leader(batch(2, producer_id=7, sequence=0), now_ms=0)
        assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
        assert partition.log.log_end_offset == 2
        gap = partition.append_as_leader(batch(1, producer_id=7, sequence=5), now_ms=0)
        assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    run(scenario())


def test_acks_all_waits_for_the_followers_then_the_high_watermark_releases_it(make):
    async def scenario():
        partition, _, _ = make()
        lead(partition)
        assert partition.leader_epoch == 5
        outcome = partition.append_as_leader(batch(2), now_ms=0, required_acks=-1)
        assert read_header(stored(partition)).partition_leader_epoch == 5
        assert partition.high_watermark == 0  # PEER of the ISR has not fetched yet
        await asyncio.sleep(0.05)
        assert not outcome.committed.done()
        piece = partition.record_follower_fetch(PEER, 0, 5, 1 << 20)
        assert piece.length > 0 and partition.high_watermark == 0  # PEER holds offsets 0..
        assert not outcome.committed.done()
        partition.record_follower_fetch(PEER, 2, 5, 1 << 20)  # PEER's log end is 2 now
        assert partition.high_watermark == 2
        assert await outcome.committed == ErrorCode.NONE
    run(scenario())


def test_acks_all_is_refused_below_min_insync_and_flagged_when_the_isr_shrinks_meanwhile(make):
    async def scenario():
        partition, _, _ = make(min_insync=2)
        lead(partition, isr=(ME,))
        refused = partition.append_as_leader(batch(), now_ms=0, required_acks=-1)
        assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == 0  # nothing appended
        assert partition.append_as_leader(batch(), now_ms=0).error == ErrorCode.NONE  # acks=1
        partition.update_replicas(PartitionLeadership(ME, 5, (ME, PEER, OTHER), (ME, PEER)))
        waiting = partition.append_as_leader(batch(), now_ms=0, required_acks=-1)
        await asyncio.sleep(0.02)
        assert partition.isr_written(5, (ME,))  # PEER dropped out while it waited
        assert await waiting.committed == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    run(scenario())


def test_acks_all_times_out_and_a_lost_leadership_answers_not_leader(make):
    async def scenario():
        partition, _, _ = make()
        lead(partition)
        late = partition.append_as_leader(batch(), now_ms=0, required_acks=-1, timeout_ms=50)
        assert await late.committed == ErrorCode.REQUEST_TIMED_OUT
        waiting = partition.append_as_leader(batch(), now_ms=0, required_acks=-1)
        await asyncio.sleep(0.02)
        partition.become_follower(PartitionLeadership(PEER, 6, (ME, PEER, OTHER), (ME, PEER)),
                                  start_high_watermark=None)
        assert await waiting.committed == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert partition.leader_epoch is None
    run(scenario())


def test_a_followers_fetch_is_refused_unless_it_is_a_replica_of_this_epoch(make):
    async def scenario():
        partition, asked, _ = make()
        assert partition.record_follower_fetch(PEER, 0, 5, 100) == \
            ErrorCode.NOT_LEADER_OR_FOLLOWER  # not replicated: no followers
        lead(partition, isr=(ME,))
        assert partition.record_follower_fetch(999, 0, 5, 100) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert partition.record_follower_fetch(PEER, 0, 4, 100) == ErrorCode.FENCED_LEADER_EPOCH
        assert partition.record_follower_fetch(PEER, 0, 6, 100) == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert asked == []
        partition.append_as_leader(batch(3), now_ms=0)
        assert partition.high_watermark == 3  # alone in its ISR
        partition.record_follower_fetch(OTHER, 1, -1, 0)  # behind: not back in the ISR yet
        assert asked == []
        assert partition.record_follower_fetch(OTHER, 3, 5, 0).length == 0  # caught up
        assert asked == [(ME, OTHER)]
    run(scenario())


def test_a_follower_takes_the_leaders_batches_high_watermark_and_log_start(make):
    async def scenario():
        partition, _, publications = make()
        partition.become_follower(PartitionLeadership(PEER, 5, (ME, PEER), (ME, PEER)),
                                  start_high_watermark=0)
        assert partition.log.hold_high_watermark
        before = publications.count
        woken = asyncio.ensure_future(partition._context.waiters.wait([partition.key], 5))
        await asyncio.sleep(0)
        leaders = batch(2, producer_id=9, sequence=0, epoch=5) + batch(1, base_offset=2, epoch=5)
        assert partition.append_as_follower(leaders, leader_high_watermark=2,
                                            leader_log_start_offset=0, now_ms=0)
        assert await woken
        assert (partition.log.log_end_offset, partition.high_watermark) == (3, 2)
        assert partition.log.leader_epochs.latest_epoch == 5
        assert publications.count == before + 1  # one publication for the whole answer
        diverged = batch(1, base_offset=7, epoch=5)
        assert not partition.append_as_follower(diverged, leader_high_watermark=3,
                                                leader_log_start_offset=0, now_ms=0)
        assert partition.log.log_end_offset == 3
        # the producer state came with the batches: promoted, this leader knows the retry
        lead(partition, isr=(ME,), epoch=6)
        retry = partition.append_as_leader(batch(2, producer_id=9, sequence=0), now_ms=0)
        assert (retry.base_offset, retry.last_offset) == (0, 1)
    run(scenario())


def test_truncation_rebuilds_the_producers_from_what_is_left(make):
    async def scenario():
        partition, _, _ = make()
        partition.append_as_leader(batch(1, producer_id=3, sequence=0), now_ms=0)
        partition.append_as_leader(batch(1, producer_id=3, sequence=1), now_ms=0)
        partition.truncate_to(1, now_ms=0)
        assert partition.log.log_end_offset == 1
        again = partition.append_as_leader(batch(1, producer_id=3, sequence=1), now_ms=0)
        assert again.error == ErrorCode.NONE and again.base_offset == 1  # appended anew
        partition.truncate_fully_and_start_at(10, now_ms=0)
        assert (partition.log_start_offset, partition.log.log_end_offset) == (10, 10)
        assert partition.append_as_leader(batch(1, producer_id=3, sequence=2),
                                          now_ms=0).base_offset == 10
    run(scenario())


def test_a_new_replica_starts_from_its_checkpointed_high_watermark(make):
    async def scenario():
        other, _, _ = make()
        other.append_as_leader(batch(4), now_ms=0)
        lead(other, start=1)  # the checkpoint said 1; PEER has not fetched
        assert other.high_watermark == 1
        other.record_follower_fetch(PEER, 4, 5, 0)
        assert other.high_watermark == 4
    run(scenario())


class AnsweringControl(Control):
    """The control plane's AlterPartition as the supervisor answers it: later, when the
    controller's ZooKeeper write is done; here, when the test says."""

    def __init__(self):
        self.requests = []

    def topics(self):
        return []

    def alter_partition(self, request, answer):
        self.requests.append((request, answer))


def test_a_replica_asked_into_the_isr_holds_the_high_watermark_until_answered(tmp_path):
    """KIP-497's maximal ISR: from the moment the leader asks to add a caught-up follower,
    the high watermark counts it, because the controller may write that ISR and a
    reassignment elect the follower before the answer comes back here. Before, the high
    watermark went on without it, and acknowledged records the new leader lacked."""
    async def scenario():
        control = AnsweringControl()
        committer = GroupCommitter()
        context = ReplicaContext(node_id=ME, worker_index=0, log_dir=tmp_path, control=control,
                                 publisher=Publications(), waiters=AppendWaiters(),
                                 committer=committer)
        manager = ReplicaManager(context, LogConfig(segment_bytes=1 << 20))
        manager.replicas.open_topic(TopicInfo(TOPIC, owners=(0,)), now_ms=0)
        partition = manager.replicas.get(TOPIC, 0)
        try:
            lead(partition, isr=(ME, PEER))
            partition.append_as_leader(batch(3), now_ms=0)
            partition.record_follower_fetch(PEER, 3, 5, 0)
            assert partition.high_watermark == 3
            partition.record_follower_fetch(OTHER, 3, 5, 0)  # caught up: asked into the ISR
            [(request, answer)] = control.requests
            assert request.isr == (ME, PEER, OTHER)
            waiting = partition.append_as_leader(batch(2), now_ms=0, required_acks=-1)
            partition.record_follower_fetch(PEER, 5, 5, 0)
            assert partition.high_watermark == 3  # OTHER, asked for, is still at 3
            await asyncio.sleep(0.02)
            assert not waiting.committed.done()
            answer(ErrorCode.NONE)  # written: the ISR is the one asked for
            await asyncio.sleep(0)
            assert partition.role.state.isr == (ME, PEER, OTHER)
            partition.record_follower_fetch(OTHER, 5, 5, 0)
            assert partition.high_watermark == 5
            assert await waiting.committed == ErrorCode.NONE

            partition.update_replicas(PartitionLeadership(ME, 5, (ME, PEER, OTHER), (ME, PEER)))
            partition.role.isr_asked_at = 0.0  # past the retry pause
            partition.record_follower_fetch(OTHER, 5, 5, 0)
            (request, answer) = control.requests[-1]
            partition.append_as_leader(batch(1), now_ms=0)
            partition.record_follower_fetch(PEER, 6, 5, 0)
            assert partition.high_watermark == 5  # held by OTHER again
            answer(ErrorCode.INVALID_REQUEST)  # refused: the written ISR alone counts again
            await asyncio.sleep(0)
            assert partition.high_watermark == 6
        finally:
            partition.close()
            committer.close()
    run(scenario())


def test_the_flush_timer_asks_only_the_logs_with_a_flush_setting(tmp_path):
    """`LocalReplicas.flushing()` is what the worker's flush timer walks ten times a second:
    the partitions whose logs have flush.messages or flush.ms, kept up to date as topics
    open, change their configs (AlterConfigs, the broker's defaults) and go."""
    import dataclasses
    committer = GroupCommitter()
    context = ReplicaContext(node_id=ME, worker_index=0, log_dir=tmp_path, control=Control(),
                             publisher=Publications(), waiters=AppendWaiters(),
                             committer=committer)
    manager = ReplicaManager(context, LogConfig(segment_bytes=1 << 20))
    replicas = manager.replicas
    plain, flushed = TopicInfo("plain", owners=(0, 0)), \
        TopicInfo("flushed", owners=(0, 0), configs={"flush.ms": "100"})

    def keys():
        return sorted(p.key for p in replicas.flushing())

    try:
        replicas.open_topic(plain, now_ms=0)
        assert keys() == []  # Kafka's defaults: nothing to walk
        replicas.open_topic(flushed, now_ms=0)
        assert keys() == [("flushed", 0), ("flushed", 1)]
        assert replicas.flushing()[0].log.flush_if_due(now_ms=0) is False  # nothing written
        replicas.open_topic(dataclasses.replace(plain, configs={"flush.messages": "1"}),
                            now_ms=0)  # AlterConfigs of a topic held here
        assert keys() == [("flushed", 0), ("flushed", 1), ("plain", 0), ("plain", 1)]
        replicas.open_topic(plain, now_ms=0)  # and back
        assert keys() == [("flushed", 0), ("flushed", 1)]
        replicas.defaults = LogConfig(segment_bytes=1 << 20, flush_ms=50)  # SIGHUP's defaults
        replicas.reconfigure([plain, flushed])
        assert keys() == [("flushed", 0), ("flushed", 1), ("plain", 0), ("plain", 1)]
        replicas.close_topic("flushed", delete=True)
        assert keys() == [("plain", 0), ("plain", 1)]
    finally:
        replicas.close()
        committer.close()
    assert keys() == []
