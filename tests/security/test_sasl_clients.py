"""Real clients over SASL_PLAINTEXT, unchanged: confluent-kafka (with a consumer group),
kafka-python, aiokafka and kcat produce and consume with PLAIN and with SCRAM-SHA-512, the
SCRAM user having been added with `klog users add` before the appliance first started; and
klog's own client (blocking and asyncio) with kafka-python's option names."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as PyTopicPartition

import klog
import klog.aio
from tests.conftest import require_binary
from tests.security.helpers import (
    CREDENTIALS,
    confluent_conf,
    python_conf,
    sasl_appliance,
)

pytestmark = pytest.mark.interop
MECHANISMS = ["PLAIN", "SCRAM-SHA-512"]
_names = itertools.count()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    started = sasl_appliance(tmp_path_factory.mktemp("sasl-clients"), log_dirs=2).start()
    yield started
    started.stop()


def conf(appliance, mechanism):
    return confluent_conf(appliance.bootstrap, mechanism, *CREDENTIALS[mechanism])


def new_topic(appliance, mechanism, partitions=2) -> str:
    name = f"sasl-{mechanism.lower()}-{next(_names)}"
    admin = AdminClient(conf(appliance, mechanism))
    admin.create_topics([NewTopic(name, num_partitions=partitions,
                                  replication_factor=1)])[name].result(timeout=30)
    return name


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes_in_a_group(appliance, mechanism):
    topic = new_topic(appliance, mechanism)
    producer = Producer({**conf(appliance, mechanism), "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(200):
        producer.produce(topic, key=f"k{i}", value=f"v{i}",
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and errors == []
    consumer = Consumer({**conf(appliance, mechanism), "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.commit(asynchronous=False)
    committed = consumer.committed(consumer.assignment(), timeout=10)
    consumer.close()
    assert sorted(got) == sorted(f"v{i}" for i in range(200))
    assert sum(tp.offset for tp in committed) == 200


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(appliance, mechanism):
    topic = new_topic(appliance, mechanism, partitions=1)
    settings = python_conf(appliance.bootstrap, mechanism, *CREDENTIALS[mechanism])
    producer = KafkaProducer(**settings, acks="all")
    for i in range(100):
        producer.send(topic, value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(**settings, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([PyTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [r.value for r in consumer]
    consumer.close()
    assert got == [f"v{i}".encode() for i in range(100)]


async def aiokafka_round_trip(settings, topic, count):
    producer = AIOKafkaProducer(**settings)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, value=f"v{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(**settings, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = AioTopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        got = []
        while len(got) < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += [r.value for records in batch.values() for r in records]
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(appliance, mechanism):
    topic = new_topic(appliance, mechanism, partitions=1)
    settings = python_conf(appliance.bootstrap, mechanism, *CREDENTIALS[mechanism])
    got = asyncio.run(aiokafka_round_trip(settings, topic, 100))
    assert got == [f"v{i}".encode() for i in range(100)]


def kcat(mechanism, appliance, *args, input_text=None):
    user, password = CREDENTIALS[mechanism]
    result = subprocess.run(
        [require_binary("kcat"), "-b", appliance.bootstrap, "-X",
         "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}", "-X",
         f"sasl.username={user}", "-X", f"sasl.password={password}", *args],
        input=input_text, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat(appliance, mechanism):
    topic = new_topic(appliance, mechanism, partitions=1)
    kcat(mechanism, appliance, "-P", "-t", topic,
         input_text="".join(f"line-{i}\n" for i in range(50)))
    out = kcat(mechanism, appliance, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert out.splitlines() == [f"line-{i}" for i in range(50)]


def klog_options(mechanism, **changes):
    user, password = CREDENTIALS[mechanism]
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password, **changes}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_klog_client(appliance, mechanism):
    options = klog_options(mechanism)
    name = f"klog-{mechanism.lower()}"
    with klog.Admin(appliance.bootstrap, **options) as admin:
        admin.create_topic(name, 2)
    with klog.Producer(bootstrap_servers=appliance.bootstrap, **options) as producer:
        for i in range(100):
            producer.send(name, b"v%d" % i, key=b"%d" % i)
        producer.flush()
    consumer = klog.Consumer(bootstrap_servers=appliance.bootstrap, group_id=f"g-{name}",
                             auto_offset_reset="earliest", **options)
    consumer.subscribe([name])
    got, deadline = [], time.monotonic() + 60
    while len(got) < 100 and time.monotonic() < deadline:
        got += [r.value for records in consumer.poll(500).values() for r in records]
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(100))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_klog_aio_client(appliance, mechanism):
    options = klog_options(mechanism)
    name = new_topic(appliance, mechanism, partitions=1)
    tp = klog.TopicPartition(name, 0)

    async def scenario():
        async with klog.aio.AIOProducer(bootstrap_servers=appliance.bootstrap,
                                        **options) as producer:
            batch = await (await producer.send_batch(name, [b"a", b"b", b"c"]))
        async with klog.aio.AIOConsumer(bootstrap_servers=appliance.bootstrap,
                                        **options) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            polled = await consumer.poll(timeout_ms=10_000, max_records=3)
        return [m.offset for m in batch], [r.value for r in polled[tp]]

    assert asyncio.run(scenario()) == ([0, 1, 2], [b"a", b"b", b"c"])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_klog_client_with_a_wrong_password_is_refused(appliance, mechanism):
    with pytest.raises(klog.errors.KafkaError) as refused:
        klog.Admin(appliance.bootstrap, **klog_options(mechanism, sasl_plain_password="no"))
    assert refused.value.code == klog.errors.ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not refused.value.retriable
