"""DescribeCluster, DescribeLogDirs, ElectLeaders and Alter/ListPartitionReassignments on an
appliance running alone: a single-node Kafka's answers, through confluent-kafka's and
kafka-python's admin clients (librdkafka has no call for the reassignment APIs)."""

from __future__ import annotations

import pytest
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka import errors as kerrors

from klog.protocol.error_codes import ErrorCode
from tests.conftest import running_appliance
from tests.interop.helpers import create_topic

TOPIC = "described"


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("cluster-admin"), log_dirs=2,
                           settings={"broker.rack": "rack-a"}) as started:
        create_topic(started.bootstrap, TOPIC, 4)
        producer = KafkaProducer(bootstrap_servers=started.bootstrap)
        for i in range(200):
            producer.send(TOPIC, f"v{i}".encode() * 10, partition=i % 4)
        producer.flush()
        producer.close()
        yield started


@pytest.fixture(scope="module")
def kadmin(appliance):
    admin = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    yield admin
    admin.close()


@pytest.fixture(scope="module")
def cadmin(appliance):
    return AdminClient({"bootstrap.servers": appliance.bootstrap})


def test_describe_cluster_reports_the_workers_with_the_configured_rack(appliance, kadmin,
                                                                        cadmin):
    described = kadmin.describe_cluster()  # DescribeCluster v1
    assert sorted(b["broker_id"] for b in described["brokers"]) == [0, 1]
    assert {b["rack"] for b in described["brokers"]} == {"rack-a"}
    assert {b["port"] for b in described["brokers"]} == {appliance.port, appliance.port + 1}
    assert described["controller_id"] == 0 and described["cluster_id"]
    cluster = cadmin.describe_cluster().result(timeout=10)  # librdkafka: Metadata
    assert cluster.cluster_id == described["cluster_id"]
    assert cluster.controller.id == 0
    assert sorted((n.id, n.rack) for n in cluster.nodes) == [(0, "rack-a"), (1, "rack-a")]


def test_describe_log_dirs_gives_each_workers_partitions_and_its_volume(appliance, kadmin):
    answers = kadmin.describe_log_dirs()  # every broker, every partition
    assert sorted(a["broker"] for a in answers) == [0, 1]
    seen = {}
    for answer in answers:
        [log_dir] = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert log_dir["log_dir"] == str(appliance.log_dirs[answer["broker"]])
        assert log_dir["total_bytes"] > log_dir["usable_bytes"] > 0  # v4
        for topic in log_dir["topics"]:
            for p in topic["partitions"]:
                seen[(topic["name"], p["partition_index"])] = p
    described = {k: v for k, v in seen.items() if k[0] == TOPIC}
    assert sorted(p for _, p in described) == [0, 1, 2, 3]  # each on the worker holding it
    assert all(p["partition_size"] > 500 and p["offset_lag"] == 0 and not p["is_future_key"]
               for p in described.values())
    only = kadmin.describe_log_dirs({TOPIC: [2]})
    listed = [(t["name"], p["partition_index"]) for a in only for d in a["log_dirs"]
              for t in d["topics"] for p in t["partitions"]]
    assert listed == [(TOPIC, 2)]


def test_preferred_election_is_never_needed_on_a_single_node(kadmin, cadmin):
    wanted = [CTopicPartition(TOPIC, 0), CTopicPartition(TOPIC, 3),
              CTopicPartition("no-such-topic", 0)]
    results = cadmin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=10)
    codes = {(tp.topic, tp.partition): (err.code() if err is not None else 0)
             for tp, err in results.items()}
    assert codes == {(TOPIC, 0): ErrorCode.ELECTION_NOT_NEEDED,
                     (TOPIC, 3): ErrorCode.ELECTION_NOT_NEEDED,
                     ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    kadmin.elect_leaders(0, {TOPIC: [0, 1]})  # ELECTION_NOT_NEEDED is no error to it
    unclean = kadmin.elect_leaders(1, {TOPIC: [1]}, raise_errors=False)
    [result] = unclean.replica_election_results
    assert [p.error_code for p in result.partition_result] == [ErrorCode.ELECTION_NOT_NEEDED]


def test_reassignments_on_a_single_node(appliance, kadmin):
    owner = {p: b["broker"] for b in kadmin.describe_log_dirs({TOPIC: [0, 1]})
             for d in b["log_dirs"] for t in d["topics"] for p in
             [x["partition_index"] for x in t["partitions"]]}
    results = kadmin.alter_partition_reassignments({
        TopicPartition(TOPIC, 0): [owner[0]],  # where it is: accepted, nothing moves
        TopicPartition(TOPIC, 1): [7],  # no such node: Kafka's code, nothing changes
        TopicPartition(TOPIC, 2): None,  # cancelling what is not moving
        TopicPartition("no-such-topic", 0): [0],
    })
    assert results == {
        TopicPartition(TOPIC, 0): None,
        TopicPartition(TOPIC, 1): kerrors.for_code(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        TopicPartition(TOPIC, 2): kerrors.for_code(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
        TopicPartition("no-such-topic", 0): kerrors.UnknownTopicOrPartitionError}
    assert kadmin.list_partition_reassignments() == {}
    assert kadmin.list_partition_reassignments({TOPIC: [0, 1]}) == {}
    again = kadmin.describe_log_dirs({TOPIC: [1]})
    assert [b["broker"] for b in again if b["log_dirs"][0]["topics"]] == [owner[1]]


def test_librdkafka_has_no_reassignment_calls(cadmin):
    """librdkafka sends neither AlterPartitionReassignments nor ListPartitionReassignments:
    its admin client has no such call (kafka-python's is the one that moves partitions)."""
    assert not hasattr(cadmin, "alter_partition_reassignments")
    assert not hasattr(cadmin, "list_partition_reassignments")


def test_without_broker_rack_metadata_and_describe_cluster_say_null(appliance_factory):
    plain = appliance_factory()
    admin = KafkaAdminClient(bootstrap_servers=plain.bootstrap)
    try:
        assert [b["rack"] for b in admin.describe_cluster()["brokers"]] == [None]
    finally:
        admin.close()
    librdkafka = AdminClient({"bootstrap.servers": plain.bootstrap})
    assert [n.rack for n in librdkafka.describe_cluster().result(10).nodes] == [None]
