"""kafka-python 3 against a real worker: its default (idempotent) producer and assign()."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.interop.helpers import create_topic

pytestmark = pytest.mark.interop


def test_default_idempotent_producer_and_assign_consumer(appliance):
    topic = "kafka-python"
    create_topic(appliance.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=appliance.bootstrap)
    assert producer.config["enable_idempotence"], "kafka-python 3 is idempotent by default"
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
               for i in range(2000)]
    producer.flush(30)
    metadata = [f.get(timeout=10) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in metadata}) == 2000

    consumer = KafkaConsumer(bootstrap_servers=appliance.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    got = [(r.key, r.value) for r in consumer]
    consumer.close()
    assert sorted(got) == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(2000))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_codecs(appliance, codec):
    topic = f"kafka-python-{codec}"
    create_topic(appliance.bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=appliance.bootstrap, compression_type=codec)
    for i in range(500):
        producer.send(topic, value=f"value-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=appliance.bootstrap, consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert [r.value for r in consumer] == [f"value-{i}".encode() for i in range(500)]
    consumer.close()


def test_kafka_python_admin_adds_partitions(appliance):
    from kafka.admin import KafkaAdminClient, NewPartitions
    topic = "kafka-python-grow"
    create_topic(appliance.bootstrap, topic, 1)
    admin = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(total_count=3)})
        described = admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == 3
    finally:
        admin.close()
