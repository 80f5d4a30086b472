"""The cluster admin APIs on three real appliances (one worker each: nodes 100, 200, 300)
against a real ZooKeeper: confluent-kafka and kafka-python describe the cluster (each node's
`broker.rack`) and the log dirs, elect a preferred leader (on the controller), and
kafka-python moves a partition with AlterPartitionReassignments while it watches the move
with ListPartitionReassignments (librdkafka has no call that sends either), while an
idempotent acks=all producer writes throughout without an error. Bad input (a node that does
not exist, cancelling what is not moving) gets Kafka's codes and changes nothing."""

from __future__ import annotations

import os
import signal

import orjson
import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as kerrors

from klog.protocol.apis import elect_leaders
from klog.protocol.error_codes import ErrorCode
from klog.wire import BrokerConnection
from tests.fleet.harness import (
    AckedWriter,
    FleetSpec,
    appliance_of,
    controller_and_epoch,
    partition_state,
)
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "shifted"
FLEET = FleetSpec("/klog-admin-cluster", log_dirs=1, settings={
    "default.replication.factor": "2", "auto.leader.rebalance.enable": "false",
    "replica.lag.time.max.ms": "5000"})


def replicas(zk, partition: int) -> list[int]:
    return orjson.loads(zk.get(f"/brokers/topics/{TOPIC}")[0])["partitions"][str(partition)]


@pytest.fixture(scope="module")
def kadmin(fleet):
    admin = KafkaAdminClient(bootstrap_servers=",".join(a.bootstrap for a in fleet))
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def cadmin(fleet):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 2)])[TOPIC].result(timeout=30)
    return admin


def test_describe_cluster_and_log_dirs(fleet, zk, kadmin, cadmin):
    controller = controller_and_epoch(zk)[0] * 100
    described = kadmin.describe_cluster()
    assert sorted((b["broker_id"], b["rack"]) for b in described["brokers"]) == [
        (100, "rack-1"), (200, "rack-2"), (300, "rack-3")]
    assert described["controller_id"] == controller
    cluster = cadmin.describe_cluster().result(timeout=10)
    assert cluster.controller.id == controller and cluster.cluster_id == described["cluster_id"]
    assert sorted((n.id, n.rack) for n in cluster.nodes) == [
        (100, "rack-1"), (200, "rack-2"), (300, "rack-3")]
    wait_until(lambda: all(partition_state(zk, TOPIC, p)["leader"] >= 0 for p in range(2)), 30,
               "leaders")
    held = {(a["broker"], t["name"], p["partition_index"])
            for a in kadmin.describe_log_dirs({TOPIC: [0, 1]})
            for d in a["log_dirs"] for t in d["topics"] for p in t["partitions"]}
    assert held == {(node, TOPIC, p) for p in range(2) for node in replicas(zk, p)}


def test_elect_and_move_under_a_producer(fleet, zk, kadmin, cadmin):
    writer = AckedWriter(",".join(a.bootstrap for a in fleet), TOPIC, 2).start()
    try:
        wait_until(lambda: len(writer.acked) >= 300, 60, "acknowledgements")
        # reorder partition 0's replicas: its preferred replica then is not its leader
        first, second = replicas(zk, 0)
        assert kadmin.alter_partition_reassignments(
            {TopicPartition(TOPIC, 0): [second, first]}) == {TopicPartition(TOPIC, 0): None}
        wait_until(lambda: replicas(zk, 0) == [second, first], 10, "the new order")
        assert partition_state(zk, TOPIC, 0)["leader"] == first
        results = cadmin.elect_leaders(ElectionType.PREFERRED, [
            CTopicPartition(TOPIC, 0), CTopicPartition(TOPIC, 1),
            CTopicPartition(TOPIC, 7)]).result(timeout=30)
        codes = {tp.partition: (e.code() if e is not None else 0) for tp, e in results.items()}
        assert codes == {0: 0, 1: ErrorCode.ELECTION_NOT_NEEDED,
                         7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert partition_state(zk, TOPIC, 0)["leader"] == second
        # every partition (a null list): none needs an election now, and those are left out
        assert cadmin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=30) == {}
        # only the controller elects, as in Kafka: another appliance says NOT_CONTROLLER
        controller = str(controller_and_epoch(zk)[0])
        other = next(a for a in fleet if a.settings["broker.id"] != controller)
        conn = BrokerConnection(other.host, other.port)
        try:
            answer = conn.call(elect_leaders, election_type=0, timeout_ms=5000,
                               topic_partitions=[elect_leaders.TopicPartitions(
                                   topic=TOPIC, partitions=[1])])
        finally:
            conn.close()
        assert answer.error_code == ErrorCode.NOT_CONTROLLER
        unclean = kadmin.elect_leaders(1, {TOPIC: [1]}, raise_errors=False)
        assert [p.error_code for r in unclean.replica_election_results
                for p in r.partition_result] == [ErrorCode.ELECTION_NOT_NEEDED]

        # bad input: Kafka's codes, nothing changed
        before = replicas(zk, 1)
        assert kadmin.alter_partition_reassignments({
            TopicPartition(TOPIC, 1): [before[0], 900], TopicPartition(TOPIC, 0): None}) == {
            TopicPartition(TOPIC, 1): kerrors.for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
            TopicPartition(TOPIC, 0): kerrors.for_code(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)}
        assert replicas(zk, 1) == before and kadmin.list_partition_reassignments() == {}

        # move a partition onto the node that has no replica of it, watching the move. That
        # node's worker is held (SIGSTOP) until the listing has shown the move: a partition
        # this small is otherwise copied before the first listing can ask. The partition is
        # one whose spare node is not the controller's, which answers the admin calls (two
        # partitions over three nodes never share both nodes, so one of them qualifies).
        controller_node = controller_and_epoch(zk)[0] * 100
        spares = {p: ({100, 200, 300} - set(replicas(zk, p))).pop() for p in range(2)}
        moved = next(p for p in range(2) if spares[p] != controller_node)
        spare, was = spares[moved], replicas(zk, moved)
        target = [spare, was[0]]
        held = appliance_of(fleet, spare).worker_pid(spare % 100)
        os.kill(held, signal.SIGSTOP)
        try:
            assert kadmin.alter_partition_reassignments({
                TopicPartition(TOPIC, moved): target}) == {TopicPartition(TOPIC, moved): None}
            moving = kadmin.list_partition_reassignments()
        finally:
            os.kill(held, signal.SIGCONT)
        assert moving == {TopicPartition(TOPIC, moved): {
            "replicas": [spare, *was], "adding_replicas": [spare], "removing_replicas": [was[1]]}}
        wait_until(lambda: not kadmin.list_partition_reassignments(), 60, "the move to end")
        assert replicas(zk, moved) == target
        acked = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked + 300, 60, "writes after the move")
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
