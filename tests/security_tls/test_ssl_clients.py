"""Real Kafka clients configured for SSL (the test CA, the server's certificate and hostname
verified) against a two-worker appliance on an SSL listener, unchanged."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time

import pytest

from tests.conftest import require_binary
from tests.security_tls.certs import make_certs
from tests.security_tls.helpers import TlsRawClient, client_context, tls_appliance

pytestmark = pytest.mark.interop
COUNT = 2000
# ApiVersions v0, correlation id 1, client id "plain": what a PLAINTEXT client sends first
PLAIN_API_VERSIONS = struct.pack(">ihhih5s", 15, 18, 0, 1, 5, b"plain")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def appliance(tmp_path_factory, certs):
    started = tls_appliance(tmp_path_factory.mktemp("tls-appliance"), certs, log_dirs=2)
    started.start()
    yield started
    started.stop()


def confluent_ssl(certs) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
            "ssl.endpoint.identification.algorithm": "https"}


def create_topic(appliance, certs, name, partitions=2):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": appliance.bootstrap, **confluent_ssl(certs)})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)], operation_timeout=10)
    futures[name].result(timeout=30)


def expected(count=COUNT):
    return sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(count))


def test_confluent_kafka_over_ssl(appliance, certs):
    from confluent_kafka import Consumer, Producer

    create_topic(appliance, certs, "confluent-ssl")
    producer = Producer({"bootstrap.servers": appliance.bootstrap, **confluent_ssl(certs)})
    for i in range(COUNT):
        producer.produce("confluent-ssl", key=f"k{i}", value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, **confluent_ssl(certs),
                         "group.id": "confluent-ssl", "auto.offset.reset": "earliest"})
    consumer.subscribe(["confluent-ssl"])
    got = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.key(), message.value()))
            if len(got) >= COUNT:
                break
    finally:
        consumer.close()
    assert sorted(got) == expected()


def test_kcat_over_ssl(appliance, certs):
    kcat = require_binary("kcat")
    create_topic(appliance, certs, "kcat-ssl")
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={certs.ca}",
           "-X", "ssl.endpoint.identification.algorithm=https"]
    lines = "".join(f"k{i}:v{i}\n" for i in range(COUNT))
    subprocess.run([kcat, "-b", appliance.bootstrap, *tls, "-P", "-t", "kcat-ssl", "-K", ":"],
                   input=lines, text=True, check=True, capture_output=True, timeout=60)
    out = subprocess.run([kcat, "-b", appliance.bootstrap, *tls, "-C", "-t", "kcat-ssl",
                          "-o", "beginning", "-e", "-q", "-f", "%k:%s\n"],
                         text=True, check=True, capture_output=True, timeout=60).stdout
    got = sorted(tuple(x.encode() for x in line.split(":")) for line in out.splitlines())
    assert got == expected()


def test_kafka_python_over_ssl(appliance, certs):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(appliance, certs, "kafka-python-ssl")
    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca), "ssl_check_hostname": True}
    producer = KafkaProducer(bootstrap_servers=appliance.bootstrap, **tls)
    for i in range(COUNT):
        producer.send("kafka-python-ssl", key=f"k{i}".encode(), value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=appliance.bootstrap, **tls,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("kafka-python-ssl", p) for p in range(2)])
    got = [(r.key, r.value) for r in consumer]
    consumer.close()
    assert sorted(got) == expected()


def test_aiokafka_over_ssl(appliance, certs):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    create_topic(appliance, certs, "aiokafka-ssl")

    async def round_trip():
        tls = {"security_protocol": "SSL",
               "ssl_context": create_ssl_context(cafile=str(certs.ca))}
        producer = AIOKafkaProducer(bootstrap_servers=appliance.bootstrap, **tls)
        await producer.start()
        try:
            sent = [await producer.send("aiokafka-ssl", key=f"k{i}".encode(),
                                        value=f"v{i}".encode()) for i in range(COUNT)]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=appliance.bootstrap, **tls,
                                    enable_auto_commit=False)
        await consumer.start()
        got = []
        try:
            partitions = [TopicPartition("aiokafka-ssl", p) for p in range(2)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            while len(got) < COUNT:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batches.values():
                    got.extend((r.key, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(round_trip())) == expected()


def test_klog_client_over_ssl(appliance, certs):
    import klog
    from klog.aio import AIOConsumer, AIOProducer

    tls = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca)}
    with klog.Admin(appliance.bootstrap, **tls) as admin:
        admin.create_topic("klog-ssl", 2)
    with klog.Producer(bootstrap_servers=appliance.bootstrap, **tls) as producer:
        for i in range(COUNT):
            producer.send("klog-ssl", key=f"k{i}".encode(), value=f"v{i}".encode())
        producer.flush()
    consumer = klog.Consumer(bootstrap_servers=appliance.bootstrap, **tls,
                             group_id="klog-ssl", auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    consumer.subscribe(["klog-ssl"])
    got = [(r.key, r.value) for r in consumer]
    consumer.close()
    assert sorted(got) == expected()

    async def aio_round_trip():
        async with AIOProducer(bootstrap_servers=appliance.bootstrap, **tls) as producer:
            await (await producer.send("klog-ssl", key=b"aio", value=b"aio"))
        async with AIOConsumer(bootstrap_servers=appliance.bootstrap, **tls,
                               auto_offset_reset="earliest",
                               consumer_timeout_ms=3000) as aio_consumer:
            aio_consumer.assign([klog.TopicPartition("klog-ssl", p) for p in range(2)])
            return [(r.key, r.value) async for r in aio_consumer]

    assert sorted(asyncio.run(aio_round_trip())) == sorted(expected() + [(b"aio", b"aio")])


def test_klog_client_refuses_a_server_it_cannot_verify(appliance, certs):
    import klog
    from klog.errors import BrokerUnavailableError

    with pytest.raises(BrokerUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        klog.Admin(appliance.bootstrap, security_protocol="SSL")  # the system's CAs only
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        TlsRawClient(appliance.port, client_context(certs), server_hostname="wrong.example")


def test_a_plaintext_client_on_the_ssl_port_is_closed_and_others_are_served(appliance, certs):
    from klog.protocol.apis import api_versions

    for port in appliance.ports():
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(PLAIN_API_VERSIONS)  # a Kafka request where a ClientHello belongs
            answer = b""
            while chunk := plain.recv(4096):
                answer += chunk
            assert not answer.startswith(b"\x00\x00"), "a Kafka answer on a TLS port"
        client = TlsRawClient(port, client_context(certs))
        answer = client.call(api_versions, 0)
        client.close()
        assert answer.error_code == 0
