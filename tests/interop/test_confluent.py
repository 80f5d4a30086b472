"""confluent-kafka (librdkafka 2.16) against a real worker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.interop.helpers import create_topic

pytestmark = pytest.mark.interop


def produce(bootstrap, topic, messages, **conf):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **conf})
    delivered = []
    errors = []

    def report(err, msg):
        (errors if err else delivered).append(err or (msg.partition(), msg.offset()))

    for key, value in messages:
        producer.produce(topic, value=value, key=key, on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return delivered


def consume(bootstrap, assignments, count, timeout_s=30):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False})
    consumer.assign(assignments)
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    consumer.close()
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_acks_all_with_each_codec_round_trips(appliance, codec):
    topic = f"confluent-{codec}"
    create_topic(appliance.bootstrap, topic, 3)
    messages = [(f"key{i}".encode(), f"value-{i}".encode() * 5) for i in range(3000)]
    delivered = produce(appliance.bootstrap, topic, messages, **{"compression.type": codec})
    assert len(delivered) == len(messages)
    got = consume(appliance.bootstrap,
                  [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)], len(messages))
    assert sorted((m.key(), m.value()) for m in got) == sorted(messages)


def test_assign_seek_and_offsets_for_times(appliance):
    topic = "confluent-seek"
    create_topic(appliance.bootstrap, topic, 1)
    produce(appliance.bootstrap, topic, [(None, f"early-{i}".encode()) for i in range(100)])
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(appliance.bootstrap, topic, [(None, f"late-{i}".encode()) for i in range(100)])

    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "seek-only",
                         "enable.auto.commit": False})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, boundary_ms)], timeout=10)
    assert found[0].offset == 100
    consumer.assign([TopicPartition(topic, 0, 0)])
    first = None
    while first is None:
        first = consumer.poll(1.0)
    consumer.seek(TopicPartition(topic, 0, 150))
    msg = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.offset() >= 150:
            break
    consumer.close()
    assert msg is not None and msg.offset() == 150 and msg.value() == b"late-50"


def test_admin_create_describe_delete(appliance):
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    topic = "confluent-admin"
    futures = admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1,
                                            config={"retention.ms": "3600000"})])
    futures[topic].result(10)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 4

    configs = admin.describe_configs([ConfigResource("topic", topic)])
    described = next(iter(configs.values())).result(10)
    assert described["retention.ms"].value == "3600000"

    again = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        again[topic].result(10)
    bad = admin.create_topics([NewTopic("bad/name", num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException):
        bad["bad/name"].result(10)

    admin.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 10
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics(timeout=10).topics


def test_admin_adds_partitions_that_then_take_messages(appliance):
    from confluent_kafka.admin import NewPartitions
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    topic = "confluent-grow"
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(10)
    produce(appliance.bootstrap, topic, [(None, b"before")], partitioner="random")

    dry = admin.create_partitions([NewPartitions(topic, 5)], validate_only=True)
    dry[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    for count, reason in ((5, "already has 5"), (3, "higher than the requested 3")):
        with pytest.raises(KafkaException, match=reason):
            admin.create_partitions([NewPartitions(topic, count)])[topic].result(10)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC"):
        admin.create_partitions([NewPartitions("no-such-topic", 3)])["no-such-topic"].result(10)

    # the new partitions are real logs on their owners: written and read back
    messages = [(None, f"p{p}".encode()) for p in range(2, 5)]
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "acks": "all"})
    for p, (_, value) in zip(range(2, 5), messages):
        producer.produce(topic, value, partition=p)
    assert producer.flush(30) == 0
    got = consume(appliance.bootstrap, [TopicPartition(topic, p, 0) for p in range(2, 5)], 3)
    assert sorted((m.partition(), m.value()) for m in got) == [(2, b"p2"), (3, b"p3"),
                                                               (4, b"p4")]
