"""klog's client against independent Kafka clients, both ways, through a real appliance.

- klog.Producer writes; kcat (librdkafka 2.0.2) and confluent-kafka (librdkafka 2.16) read the
  same keys, values and headers, byte for byte, with every codec.
- confluent-kafka (raw snappy blocks) and kafka-python (xerial-framed snappy) write;
  klog.Consumer reads the same bytes.
- klog's key partitioner agrees with kafka-python's DefaultPartitioner (offline, many keys and
  partition counts) and with where the broker put kafka-python's keyed records.
"""

from __future__ import annotations

import random
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from kafka import KafkaProducer
from kafka.partitioner import DefaultPartitioner

import klog
from klog.producer.partitioner import Partitioner
from tests.client.conftest import read_all
from tests.conftest import require_binary

pytestmark = pytest.mark.interop
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."


def text_messages(seed: int, count: int):
    """Printable keys/values/headers (kcat prints them in a line format)."""
    rnd = random.Random(seed)
    word = lambda n: "".join(rnd.choice(TEXT) for _ in range(n)).encode()  # noqa: E731
    return [(word(rnd.randrange(1, 12)), word(rnd.randrange(1, 200)),
             [("h1", word(5)), ("h2", word(3))]) for _ in range(count)]


def produce_with_klog(bootstrap, topic, sent, codec):
    with klog.Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=2,
                       batch_size=16384) as producer:
        futures = [producer.send(topic, v, key=k, headers=h) for k, v, h in sent]
        return [f.result(timeout=30) for f in futures]


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_reads_what_klog_wrote(broker, topic_factory, codec):
    kcat = require_binary("kcat")
    topic = topic_factory(2)
    sent = text_messages(seed=CODECS.index(codec), count=1000)
    metadata = produce_with_klog(broker.bootstrap, topic, sent, codec)
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning",
                          "-e", "-q", "-f", "%p|%o|%k|%s|%h\n"],
                         capture_output=True, timeout=60, check=True).stdout
    rows = {}
    for line in out.splitlines():
        partition, offset, key, value, headers = line.split(b"|")
        rows[(int(partition), int(offset))] = (key, value, headers)
    assert len(rows) == len(sent)
    for (key, value, headers), where in zip(sent, metadata):
        expected_headers = b",".join(k.encode() + b"=" + v for k, v in headers)
        assert rows[(where.partition, where.offset)] == (key, value, expected_headers)


def binary_messages(seed: int, count: int):
    rnd = random.Random(seed)
    return [(rnd.randbytes(rnd.randrange(1, 20)), rnd.randbytes(rnd.randrange(0, 400)),
             [("bin", rnd.randbytes(8)), ("text", b"x" * rnd.randrange(3))])
            for _ in range(count)]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_reads_what_klog_wrote(broker, topic_factory, codec):
    topic = topic_factory(3)
    sent = binary_messages(seed=20 + CODECS.index(codec), count=1500)
    metadata = produce_with_klog(broker.bootstrap, topic, sent, codec)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False})
    consumer.assign([CTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), msg.headers())
    consumer.close()
    assert len(got) == len(sent)
    for (key, value, headers), where in zip(sent, metadata):
        assert got[(where.partition, where.offset)] == (key, value, headers)


def test_klog_reads_what_confluent_wrote_with_raw_snappy(broker, topic_factory):
    topic = topic_factory(2)
    sent = binary_messages(seed=31, count=3000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "snappy",
                         "linger.ms": 5, "acks": "all"})
    for key, value, headers in sent:
        producer.produce(topic, value=value, key=key, headers=headers)
        producer.poll(0)
    assert producer.flush(30) == 0
    got = read_all(broker.bootstrap, topic, len(sent))
    assert sorted((r.key, r.value, r.headers) for r in got) == sorted(
        (k, v, h) for k, v, h in sent)


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "zstd"])
def test_klog_reads_what_kafka_python_wrote(broker, topic_factory, codec):
    topic = topic_factory(2)
    sent = binary_messages(seed=40, count=1000)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                             linger_ms=5)
    futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in sent]
    producer.flush(30)
    places = [f.get(timeout=10) for f in futures]
    producer.close()
    got = {(r.partition, r.offset): r for r in read_all(broker.bootstrap, topic, len(sent))}
    for (key, value, headers), where in zip(sent, places):
        record = got[(where.partition, where.offset)]
        assert (record.key, record.value, record.headers) == (key, value, headers)


class _Cluster:
    """The three methods kafka-python's DefaultPartitioner asks of its cluster."""

    def __init__(self, topic, count):
        self._topic, self._count = topic, count

    def topics(self):
        return {self._topic}

    def partitions_for_topic(self, topic):
        return set(range(self._count))

    available_partitions_for_topic = partitions_for_topic


def test_keys_land_where_kafka_pythons_default_partitioner_puts_them():
    rnd = random.Random(7)
    ours = Partitioner(random.Random(0))
    theirs = DefaultPartitioner()
    keys = [rnd.randbytes(rnd.randrange(0, 40)) for _ in range(3000)]
    keys += [f"user-{i}".encode() for i in range(1000)]
    for count in (1, 2, 3, 6, 7, 12, 100):
        cluster = _Cluster("t", count)
        for key in keys:
            expected = theirs.partition("t", key, key, None, None, cluster)
            assert ours.for_key("t", key, count) == expected, (key, count)


def test_klog_and_kafka_python_put_the_same_keys_on_the_same_partitions(broker, topic_factory):
    topic_ours, topic_theirs = topic_factory(6), topic_factory(6)
    keys = [f"device-{i}".encode() for i in range(300)]
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        ours = [producer.send(topic_ours, b"v", key=k) for k in keys]
        ours = [f.result(timeout=30).partition for f in ours]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    theirs = [producer.send(topic_theirs, key=k, value=b"v") for k in keys]
    producer.flush(30)
    theirs = [f.get(timeout=10).partition for f in theirs]
    producer.close()
    assert ours == theirs
    assert len(set(ours)) == 6
