"""KIP-951's leader hints on three real appliances (one worker each: nodes 100, 200, 300):
a NOT_LEADER_OR_FOLLOWER answer of Produce v10 names the partition's current leader and its
endpoint, Fetch v12's the leader; older versions carry none. Then a leader is moved while
every appliance lives (replicas reordered, a preferred election): librdkafka and klog's
producer, both holding the old leader, produce on at the new one, klog's without asking
Metadata again (librdkafka's own debug log shows it took the hint before any Metadata). And
the failover fix's bookkeeping: a departed node is listed in Metadata's brokers for the grace
only (perf/bench_failover.py measures what it buys on kill -9)."""

from __future__ import annotations

import re
import threading
import time

import orjson
import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition

import klog
from klog.protocol.apis import fetch, metadata, produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from klog.wire import BrokerConnection
from tests.fleet.harness import FleetSpec, partition_state
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "hinted"
NOT_LEADER = ErrorCode.NOT_LEADER_OR_FOLLOWER
FLEET = FleetSpec("/klog-leader-hints", log_dirs=1, settings={
    "default.replication.factor": "3", "auto.leader.rebalance.enable": "false"})


def replicas(zk) -> list[int]:
    return orjson.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"]["0"]


def appliance_of(fleet, node: int):
    return next(a for a in fleet if a.settings["broker.id"] == str(node // 100))


def call(appliance, module, version: int, body):
    conn = BrokerConnection(appliance.host, appliance.port)
    try:
        return conn.request(module.SPEC.key, version, body)
    finally:
        conn.close()


def produce_body(value: bytes):
    batch = build_batch([(None, None, value, [])], now_ms=int(time.time() * 1000))
    return produce.Request(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        produce.TopicProduceData(name=TOPIC, partition_data=[
            produce.PartitionProduceData(index=0, records=bytes(batch))])])


@pytest.fixture(scope="module")
def topic(fleet, zk):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(timeout=30)
    wait_until(lambda: len(partition_state(zk, TOPIC, 0)["isr"]) == 3, 30, "a full ISR")
    # a hint is the leader a worker's view of the topic names, which the fleet's broadcast
    # updates; a full ISR in ZooKeeper may come first on a busy host (it answered -1 once)
    state = partition_state(zk, TOPIC, 0)
    wait_until(lambda: all(leader_and_epoch_seen_by(a) == (state["leader"], state["leader_epoch"])
                           for a in fleet), 30, "every appliance's view of the leader")
    return TOPIC


def test_not_leader_answers_carry_the_hint(fleet, zk, topic):
    state = partition_state(zk, TOPIC, 0)
    leader, epoch = state["leader"], state["leader_epoch"]
    follower = appliance_of(fleet, next(r for r in replicas(zk) if r != leader))
    at_leader = appliance_of(fleet, leader)

    answer = call(follower, produce, 10, produce_body(b"1")).responses[0].partition_responses[0]
    assert answer.error_code == NOT_LEADER
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (
        leader, epoch)
    endpoints = call(follower, produce, 10, produce_body(b"1")).node_endpoints
    assert [(n.node_id, n.host, n.port, n.rack) for n in endpoints] == [
        (leader, at_leader.host, at_leader.port, f"rack-{leader // 100}")]
    # v8 has no place for it: the same answer without
    old = call(follower, produce, 8, produce_body(b"1"))
    assert old.responses[0].partition_responses[0].error_code == NOT_LEADER

    # v10 at the leader appends (flexible both ways), and carries no hint
    done = call(at_leader, produce, 10, produce_body(b"2"))
    part = done.responses[0].partition_responses[0]
    assert part.error_code == 0 and part.base_offset >= 0
    assert part.current_leader.leader_id == -1 and done.node_endpoints == []

    # Fetch v12 reads at the leader; a follower answers with the leader (epoch fenced too)
    wanted = fetch.Request(max_wait_ms=0, min_bytes=0, topics=[fetch.FetchTopic(
        topic=TOPIC, partitions=[fetch.FetchPartition(partition=0, fetch_offset=0,
                                                      partition_max_bytes=1 << 20)])])
    read = call(at_leader, fetch, 12, wanted).responses[0].partitions[0]
    assert read.error_code == 0 and read.high_watermark > 0 and bytes(read.records)
    elsewhere = call(follower, fetch, 12, wanted).responses[0].partitions[0]
    if elsewhere.error_code == NOT_LEADER:
        assert elsewhere.current_leader.leader_id == leader
    fenced = fetch.Request(max_wait_ms=0, min_bytes=0, topics=[fetch.FetchTopic(
        topic=TOPIC, partitions=[fetch.FetchPartition(
            partition=0, fetch_offset=0, current_leader_epoch=epoch + 5,
            partition_max_bytes=1 << 20)])])
    odd = call(at_leader, fetch, 12, fenced).responses[0].partitions[0]
    assert odd.error_code in (ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH)


class LibrdkafkaTrace:
    """librdkafka's debug log (the `logger` protocol), with times."""

    def __init__(self):
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def log(self, level, fmt, *args) -> None:
        with self._lock:
            self.lines.append(fmt % args if args else fmt)

    def since(self, mark: int) -> list[str]:
        with self._lock:
            return self.lines[mark:]


def test_producers_follow_a_moved_leader(fleet, zk, topic):
    bootstrap = ",".join(a.bootstrap for a in fleet)
    trace = LibrdkafkaTrace()
    rdk = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                    "debug": "protocol,metadata,topic", "logger": trace})
    ours = klog.Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    asked = []
    cluster = ours._core.cluster
    original = cluster.build_request
    cluster.build_request = lambda now_ms: (asked.append(now_ms), original(now_ms))[1]
    try:
        acked = []
        rdk.produce(TOPIC, b"before", partition=0, on_delivery=lambda e, m: acked.append(e))
        rdk.flush(30)
        ours.send(TOPIC, b"before", partition=0).result(timeout=30)
        assert acked == [None]
        old = partition_state(zk, TOPIC, 0)["leader"]
        # reorder the replicas, elect the preferred one: the leader moves, the old one lives
        order = replicas(zk)
        new_order = [r for r in order if r != old] + [old]
        kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            kadmin.alter_partition_reassignments({TopicPartition(TOPIC, 0): new_order})
        finally:
            kadmin.close()
        wait_until(lambda: replicas(zk) == new_order, 10, "the new order")
        admin = AdminClient({"bootstrap.servers": bootstrap})  # held while it answers
        admin.elect_leaders(ElectionType.PREFERRED, [CTopicPartition(TOPIC, 0)]).result(30)
        new = partition_state(zk, TOPIC, 0)["leader"]
        assert new == new_order[0] != old
        # every appliance knows before the clients try (the workers learn within moments)
        wait_until(lambda: all(leader_seen_by(a) == new for a in fleet), 10, "the workers")

        asked_before, mark = len(asked), len(trace.lines)
        meta = ours.send(TOPIC, b"after", partition=0).result(timeout=30)
        assert meta.offset >= 0
        assert len(asked) == asked_before, "klog's producer asked Metadata despite the hint"
        assert cluster.leader_of(TOPIC, 0) == new
        rdk.produce(TOPIC, b"after", partition=0, on_delivery=lambda e, m: acked.append(e))
        assert rdk.flush(30) == 0 and acked == [None, None]
        lines = trace.since(mark)
        assert any(re.search(r"Received ProduceResponse \(v10", line) for line in lines), lines
        update = next((i for i, line in enumerate(lines)
                       if re.search(rf"leader.*-> leader {new}|leader-id update {old} -> {new}",
                                    line)), None)
        assert update is not None, lines
        assert not any("Received MetadataResponse" in line for line in lines[:update]), (
            "librdkafka learned the new leader from Metadata, not from the hint")
    finally:
        ours.close()
        rdk.flush(5)


def leader_seen_by(appliance) -> int:
    return leader_and_epoch_seen_by(appliance)[0]


def leader_and_epoch_seen_by(appliance) -> tuple[int, int]:
    answer = call(appliance, metadata, 8, metadata.Request(
        topics=[metadata.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False))
    partitions = answer.topics[0].partitions
    if not partitions:
        return -1, -1
    return partitions[0].leader_id, partitions[0].leader_epoch


def test_departed_nodes_are_listed_for_the_grace_only(monkeypatch):
    """What Metadata's brokers keep of a node that left (appliance.control.departed_nodes)."""
    from appliance.control import departed_nodes
    from appliance.control.topics import FleetNode

    now = [100.0]
    monkeypatch.setattr(departed_nodes.time, "monotonic", lambda: now[0])
    a, b = FleetNode(100, "h", 1, None), FleetNode(200, "h", 2, None)
    nodes = departed_nodes.DepartedNodes()
    nodes.update(None, {100: a, 200: b})
    assert nodes.within(3) == []
    nodes.update({100: a, 200: b}, {200: b})  # left leading nothing (controlled): not kept
    assert nodes.within(3) == []
    nodes.update({200: b}, {200: b, 100: a})
    nodes.update({100: a, 200: b}, {200: b}, leaders={100})  # left while leading: kept
    now[0] += 2
    assert nodes.within(3) == [a] and nodes.within(0) == []
    now[0] += 2
    assert nodes.within(3) == []
    nodes.update({200: b}, {200: b, 100: a})
    nodes.update({200: b, 100: a}, {100: a}, leaders={200})
    nodes.update({100: a}, {100: a, 200: b})  # back: no longer departed
    assert nodes.within(3) == []
