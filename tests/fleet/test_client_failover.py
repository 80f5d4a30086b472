"""Consumers through a failover, on three real appliances (two workers each) and a real
three-server ZooKeeper: a topic of replication factor 3 and min.insync.replicas=2 written by an
idempotent acks=all confluent-kafka producer, read throughout by consumers of the four clients
(confluent-kafka, kafka-python, aiokafka, klog; assigned from offset 0) while the leader's
appliance is killed with kill -9 and started again. Each consumer must end with every
acknowledged value, in per-partition offset order, its offsets contiguous from 0 (no reset to
the log start, no skip) and no offset holding two different values.

Then the broker's side of KIP-320 on the fleet left by that failover (leader epochs above 0):
Fetch and ListOffsets with an old, the current and a new `current_leader_epoch`, at the
leader's worker, at its appliance's other worker (through shm), and at a follower; the leader
epochs ListOffsets answers; and a fetch above the high watermark but within the log (what a
new leader sees while its high watermark catches up) answered empty; and a new leader
whose high watermark still lags, made to last by a stopped follower."""

from __future__ import annotations

import contextlib
import os
import signal

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from klog.protocol.apis import fetch, list_offsets
from tests.fleet.harness import (
    SESSION_MS,
    AckedWriter,
    FleetSpec,
    appliance_of,
    kill_appliance,
    led,
    partition_state,
    replica_batches,
)
from tests.fleet.readers import READERS
from tests.polling import wait_until
from tests.worker.raw import RawClient

pytestmark = pytest.mark.interop

TOPIC = "failover"
PARTITIONS = 6  # two led by each appliance: the kill moves two
LAG_MS = 20_000  # replica.lag.time.max.ms: a follower stopped for a while stays in the ISR
FENCED, UNKNOWN_EPOCH, NOT_LEADER, OFFSET_NOT_AVAILABLE = 74, 75, 6, 78
# No automatic rebalance: the tests below ask a moved partition's leader one question after
# another, and the controller's first imbalance check (5 s after its election) moved that
# partition back to the restarted appliance between two of them whenever the restart came
# sooner than that (ListOffsets then answered NOT_LEADER_OR_FOLLOWER). Leadership stays
# where the failover put it.
FLEET = FleetSpec("/klog-client-failover", settings={
    "replica.lag.time.max.ms": str(LAG_MS), "default.replication.factor": "3",
    "auto.leader.rebalance.enable": "false"})


def states(zk) -> dict[int, dict]:
    return {p: partition_state(zk, TOPIC, p) for p in range(PARTITIONS)}


@pytest.fixture(scope="module")
def failover(fleet, zk):
    """The scenario, run once: the readers and the writer through a kill -9 of the appliance
    leading most partitions, and its restart. Returns (writer, readers, epochs before)."""
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 30, "leaders")
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk).values()), 30, "full ISRs")
    before = states(zk)
    leaders = [s["leader"] // 100 for s in before.values()]
    victim = fleet[max(set(leaders), key=leaders.count) - 1]
    victim_id = int(victim.settings["broker.id"])
    bootstrap = ",".join(a.bootstrap for a in fleet)
    readers = [cls(bootstrap, TOPIC, PARTITIONS).start() for cls in READERS]
    writer = AckedWriter(bootstrap, TOPIC, PARTITIONS).start()
    try:
        wait_until(lambda: len(writer.acked) >= 1000, 60, "acknowledgements before the kill")
        kill_appliance(victim)
        acked_at_kill = len(writer.acked)
        wait_until(lambda: all(s["leader"] >= 0 and s["leader"] // 100 != victim_id
                               for s in states(zk).values()),
                   SESSION_MS / 1000 + 30, "new leaders")
        wait_until(lambda: len(writer.acked) >= acked_at_kill + 1000, 90,
                   "acknowledgements from the new leaders")
        victim.start(timeout_s=60)
        wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk).values()), 60,
                   "the restarted appliance to rejoin every ISR")
        acked_at_restart = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked_at_restart + 500, 60,
                   "acknowledgements after the restart")
    finally:
        writer.stop()
        ends = {p: max((o for (q, o) in writer.acked if q == p), default=-1) + 1
                for p in range(PARTITIONS)}
        for reader in readers:
            reader.stop(ends, timeout_s=60)
    return writer, {r.name: r for r in readers}, before


def test_the_failover_moved_leadership_and_lost_no_acknowledgement(failover, zk):
    writer, _, before = failover
    assert not writer.errors, writer.errors[:5]
    after = states(zk)
    assert any(after[p]["leader_epoch"] > before[p]["leader_epoch"] for p in after)


@pytest.mark.parametrize("client", [cls.name for cls in READERS])
def test_a_consumer_reads_through_the_failover_without_reset_or_skip(failover, client):
    writer, readers, _ = failover
    reader = readers[client]
    assert not reader.errors, reader.errors[:5]
    for partition in range(PARTITIONS):
        acked = {o: v for (p, o), v in writer.acked.items() if p == partition}
        read = reader.read[partition]
        offsets = [o for o, _ in read]
        # contiguous from 0: a reset would repeat offsets (earliest) or skip some (latest)
        assert offsets == list(range(len(offsets))), \
            f"{client} partition {partition}: offsets not contiguous from 0: " \
            f"{_first_break(offsets)}"
        assert len(offsets) >= max(acked) + 1, f"{client} partition {partition}: ended early"
        by_offset = dict(read)
        missing = {o: v for o, v in acked.items() if by_offset.get(o) != v}
        assert not missing, f"{client} partition {partition}: {len(missing)} acknowledged " \
                            f"records not read as written, e.g. {sorted(missing.items())[:3]}"


def test_no_offset_holds_two_values_across_the_consumers(failover):
    _, readers, _ = failover
    for partition in range(PARTITIONS):
        seen: dict[int, int] = {}
        for reader in readers.values():
            for offset, value in reader.read[partition]:
                assert seen.setdefault(offset, value) == value, \
                    f"partition {partition} offset {offset}: {seen[offset]} and {value}"


def _first_break(offsets: list[int]) -> str:
    for i, offset in enumerate(offsets):
        if offset != i:
            return f"at position {i}: {offsets[max(i - 2, 0):i + 3]}"
    return "none"


# the broker's answers ------------------------------------------------------------------------


def node_port(fleet, node_id: int) -> int:
    return appliance_of(fleet, node_id).port + node_id % 100


def fetch_answer(port: int, partition: int, offset: int, epoch: int):
    client = RawClient(port)
    try:
        response = client.call(
            fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, topics=[fetch.FetchTopic(
                topic=TOPIC, partitions=[fetch.FetchPartition(
                    partition=partition, current_leader_epoch=epoch, fetch_offset=offset,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id="")
    finally:
        client.close()
    return response.responses[0].partitions[0]


def list_offsets_answer(port: int, partition: int, timestamp: int, epoch: int):
    client = RawClient(port)
    try:
        response = client.call(
            list_offsets, 5, replica_id=-1, isolation_level=0, topics=[
                list_offsets.ListOffsetsTopic(name=TOPIC, partitions=[
                    list_offsets.ListOffsetsPartition(partition_index=partition,
                                                      current_leader_epoch=epoch,
                                                      timestamp=timestamp)])])
    finally:
        client.close()
    return response.topics[0].partitions[0]


def moved_partition(zk, failover, fleet) -> tuple[int, dict]:
    """A partition whose leader epoch the failover raised (an older one exists), once its
    leader's worker answers in the epoch ZooKeeper names: a state the controller has just
    written takes a moment to reach the workers."""
    before = failover[2]

    def settled():
        partition, state = next((p, s) for p, s in states(zk).items()
                                if s["leader_epoch"] > before[p]["leader_epoch"])
        answer = list_offsets_answer(node_port(fleet, state["leader"]), partition, -1,
                                     state["leader_epoch"])
        return answer.error_code == 0 and (partition, state)
    return wait_until(settled, 30, "a moved partition's leader to lead in its epoch")


def test_fetch_checks_the_current_leader_epoch(failover, fleet, zk):
    partition, state = moved_partition(zk, failover, fleet)
    leader, epoch = state["leader"], state["leader_epoch"]
    sibling = leader - leader % 100 + (1 - leader % 100)  # the other worker of its appliance
    follower = next(r for r in state["isr"] if r // 100 != leader // 100)
    for node in (leader, sibling):
        port = node_port(fleet, node)
        assert fetch_answer(port, partition, 0, epoch - 1).error_code == FENCED
        assert fetch_answer(port, partition, 0, epoch + 1).error_code == UNKNOWN_EPOCH
        for asked in (epoch, -1):
            answer = fetch_answer(port, partition, 0, asked)
            assert answer.error_code == 0 and answer.records, (node, asked)
    answer = fetch_answer(node_port(fleet, follower), partition, 0, epoch)
    assert answer.error_code == NOT_LEADER  # consumers read from the leader's appliance
    assert fetch_answer(node_port(fleet, follower), partition, 0, epoch - 1).error_code == FENCED


def test_list_offsets_checks_the_epoch_and_answers_with_one(failover, fleet, zk):
    partition, state = moved_partition(zk, failover, fleet)
    leader, epoch = state["leader"], state["leader_epoch"]
    port = node_port(fleet, leader)
    assert list_offsets_answer(port, partition, -1, epoch - 1).error_code == FENCED
    assert list_offsets_answer(port, partition, -1, epoch + 1).error_code == UNKNOWN_EPOCH
    follower = next(r for r in state["isr"] if r // 100 != leader // 100)
    assert list_offsets_answer(node_port(fleet, follower), partition, -1, epoch
                               ).error_code == NOT_LEADER
    latest = list_offsets_answer(port, partition, -1, epoch)
    assert (latest.error_code, latest.leader_epoch) == (0, epoch) and latest.offset > 0
    batches = replica_batches(appliance_of(fleet, leader), TOPIC, partition)

    def epoch_at(offset: int) -> int:
        return next(b[2] for b in batches if b[0] <= offset <= b[0] + b[1])

    earliest = list_offsets_answer(port, partition, -2, -1)
    assert (earliest.offset, earliest.leader_epoch) == (0, epoch_at(0))
    assert epoch_at(0) < epoch  # the first records were written before the failover
    by_time = list_offsets_answer(port, partition, 0, epoch)  # the first record at or after 0
    assert (by_time.offset, by_time.leader_epoch) == (0, epoch_at(0))


def test_a_fetch_above_the_high_watermark_within_the_log_is_empty(failover, fleet, zk):
    """A follower of the ISR stopped (SIGSTOP, well within replica.lag.time.max.ms) holds the
    high watermark while acks=1 appends move the log end: the leader is then as a leader just
    elected whose high watermark lags what consumers have read. A consumer's fetch between
    the two, at either worker of the leader's appliance, is answered empty, not
    OFFSET_OUT_OF_RANGE (which makes consumers reset)."""
    partition, state = moved_partition(zk, failover, fleet)
    leader, epoch = state["leader"], state["leader_epoch"]
    follower = next(r for r in state["isr"] if r // 100 != leader // 100)
    port = node_port(fleet, leader)
    high_watermark = list_offsets_answer(port, partition, -1, epoch).offset
    pid = appliance_of(fleet, follower).worker_pid(follower % 100)
    os.kill(pid, signal.SIGSTOP)
    try:
        producer = Producer({"bootstrap.servers": appliance_of(fleet, leader).bootstrap,
                             "acks": 1, "enable.idempotence": False, "linger.ms": 0})
        acked = []
        for i in range(5):
            producer.produce(TOPIC, b"%d" % (10_000_000 + i), partition=partition,
                             on_delivery=lambda err, msg: acked.append(err is None))
        assert producer.flush(30) == 0 and acked == [True] * 5
        log_end = high_watermark + 5
        sibling = leader - leader % 100 + (1 - leader % 100)
        for node in (leader, sibling):
            for offset in (high_watermark + 1, log_end):
                answer = fetch_answer(node_port(fleet, node), partition, offset, epoch)
                assert answer.error_code == 0 and not answer.records, (node, offset)
                assert answer.high_watermark == high_watermark  # still held by the follower
        beyond = fetch_answer(port, partition, log_end + 1, epoch)
        assert beyond.error_code == 1  # OFFSET_OUT_OF_RANGE past the log end, as Kafka
    finally:
        resume(pid)


def test_a_new_leader_whose_high_watermark_lags_answers_without_resetting(failover, fleet, zk):
    """Right after a failover the new leader holds records up to the old leader's log end,
    but its high watermark is the one it last learned as a follower, until its followers
    fetch from it. Made to last: the third replica is stopped (SIGSTOP) while acks=1
    records arrive, so the old leader's high watermark stays behind, then the old leader's
    appliance is killed and the second replica elected. Meanwhile a fetch between the two
    is an empty answer at either worker of its appliance, and ListOffsets for the latest
    offset answers the retriable OFFSET_NOT_AVAILABLE (not an offset below what consumers
    have read); once the third replica is back, the high watermark catches up."""
    partition, state = next((p, s) for p, s in states(zk).items()
                            if s["leader"] == _replicas(zk, p)[0] and len(s["isr"]) == 3)
    old, second, third = _replicas(zk, partition)
    epoch = state["leader_epoch"]
    # the starting point: the high watermark at the log end (a leader whose high watermark
    # lags the start of its epoch answers OFFSET_NOT_AVAILABLE; one that lags by acks=1
    # writes answers the high watermark)
    high_watermark = wait_until(lambda: (a := list_offsets_answer(
        node_port(fleet, old), partition, -1, epoch)).error_code == 0
        and a.offset == _log_end(appliance_of(fleet, old), partition) and (a.offset,), 30,
        "the leader's high watermark to reach its log end")[0]
    pid = appliance_of(fleet, third).worker_pid(third % 100)
    os.kill(pid, signal.SIGSTOP)
    victim = appliance_of(fleet, old)
    try:
        producer = Producer({"bootstrap.servers": victim.bootstrap, "acks": 1,
                             "enable.idempotence": False, "linger.ms": 0})
        for i in range(5):
            producer.produce(TOPIC, b"%d" % (20_000_000 + i), partition=partition)
        assert producer.flush(30) == 0
        log_end = high_watermark + 5
        wait_until(lambda: _log_end(appliance_of(fleet, second), partition) == log_end, 30,
                   "the second replica to copy the records")
        kill_appliance(victim)
        new = wait_until(lambda: (s := partition_state(zk, TOPIC, partition))["leader"]
                         == second and s, SESSION_MS / 1000 + 30, "the second replica to lead")
        port = node_port(fleet, second)
        answer = wait_until(lambda: (a := list_offsets_answer(
            port, partition, -1, new["leader_epoch"])).error_code != UNKNOWN_EPOCH and a,
            30, "the new leader to hear of its election")
        assert answer.error_code == OFFSET_NOT_AVAILABLE
        sibling = second - second % 100 + (1 - second % 100)
        for node in (second, sibling):
            for offset in (high_watermark + 1, log_end):
                fetched = fetch_answer(node_port(fleet, node), partition, offset,
                                       new["leader_epoch"])
                assert fetched.error_code == 0 and not fetched.records, (node, offset)
                assert fetched.high_watermark == high_watermark
    finally:
        resume(pid)
    latest = wait_until(lambda: (a := list_offsets_answer(
        port, partition, -1, new["leader_epoch"])).error_code == 0 and a, 60,
        "the high watermark to catch up")
    assert (latest.offset, latest.leader_epoch) == (log_end, new["leader_epoch"])


def resume(pid: int) -> None:
    """SIGCONT, unless the supervisor already replaced the stopped worker (it does once the
    worker has missed its heartbeats for worker.heartbeat.timeout.ms, 30 s; on a loaded
    machine a test may keep it stopped that long): the test's own assertion then speaks."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def _log_end(appliance, partition: int) -> int:
    """The end of the appliance's replica of the partition, as its segment files hold it."""
    batches = replica_batches(appliance, TOPIC, partition) or [(0, -1)]
    return batches[-1][0] + batches[-1][1] + 1


def _replicas(zk, partition: int) -> list[int]:
    """The partition's replicas in assignment order (the first live one in the ISR leads)."""
    data, _ = zk.get(f"/brokers/topics/{TOPIC}")
    return orjson.loads(data)["partitions"][str(partition)]
