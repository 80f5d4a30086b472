"""The acceptance round trip of issue 22, driven through each real client: administer (create
a topic, list and describe it), produce, and consume in a group (subscribe, commit), over a
secured listener, with the server's certificate verified hostname included.

`Secured` holds one way of connecting (SASL_SSL with a mechanism and a user, or SSL with a
client certificate) and writes it in each client's own option names; the drivers take it and
assert. kcat cannot create a topic: it administers by listing the cluster's metadata, and its
topic comes from the broker's auto-creation on its first produce.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import require_binary

COUNT = 300
PARTITIONS = 2


@dataclass(frozen=True)
class Secured:
    protocol: str  # SASL_SSL or SSL
    ca: Path
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None
    cert: Path | None = None  # a client certificate (SSL with ssl.client.auth=required)
    key: Path | None = None

    def confluent(self) -> dict:
        """librdkafka's names (confluent-kafka, kcat): hostname verification on."""
        conf = {"security.protocol": self.protocol, "ssl.ca.location": str(self.ca),
                "ssl.endpoint.identification.algorithm": "https"}
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.user,
                         "sasl.password": self.password})
        if self.cert:
            conf.update({"ssl.certificate.location": str(self.cert),
                         "ssl.key.location": str(self.key)})
        return conf

    def kafka_python(self) -> dict:
        """kafka-python's names (its ssl_check_hostname defaults to True; said anyway)."""
        conf = {"security_protocol": self.protocol, "ssl_cafile": str(self.ca),
                "ssl_check_hostname": True}
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.user,
                         "sasl_plain_password": self.password})
        if self.cert:
            conf.update({"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)})
        return conf

    def aiokafka(self) -> dict:
        """aiokafka takes an SSLContext; its helper's context checks the hostname."""
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(cafile=str(self.ca),
                                     certfile=str(self.cert) if self.cert else None,
                                     keyfile=str(self.key) if self.key else None)
        assert context.check_hostname
        conf = {"security_protocol": self.protocol, "ssl_context": context}
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.user,
                         "sasl_plain_password": self.password})
        return conf


def records(count: int = COUNT) -> list[tuple[bytes, bytes]]:
    return [(f"k{i}".encode(), f"v{i}".encode()) for i in range(count)]


def confluent_round_trip(bootstrap: str, secured: Secured, topic: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = {"bootstrap.servers": bootstrap, **secured.confluent()}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=1)])[topic].result(timeout=30)
    listed = admin.list_topics(timeout=30).topics
    assert topic in listed and len(listed[topic].partitions) == PARTITIONS
    producer = Producer({**conf, "acks": "all"})
    errors = []
    for key, value in records():
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(30) == 0 and errors == []
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    try:
        while len(got) < COUNT and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.key(), message.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=10)
    finally:
        consumer.close()
    assert sorted(got) == sorted(records())
    assert sum(tp.offset for tp in committed) == COUNT


def kafka_python_round_trip(bootstrap: str, secured: Secured, topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    conf = {"bootstrap_servers": bootstrap, **secured.kafka_python()}
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        assert topic in admin.list_topics()
        described = admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == PARTITIONS
    finally:
        admin.close()
    producer = KafkaProducer(**conf, acks="all")
    for key, value in records():
        producer.send(topic, key=key, value=value)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, **conf, group_id=f"g-{topic}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        got = []
        for record in consumer:
            got.append((record.key, record.value))
            if len(got) == COUNT:
                break
        consumer.commit()
        committed = sum(consumer.committed(tp) or 0 for tp in consumer.assignment())
    finally:
        consumer.close()
    assert sorted(got) == sorted(records())
    assert committed == COUNT


def aiokafka_round_trip(bootstrap: str, secured: Secured, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run():
        conf = {"bootstrap_servers": bootstrap, **secured.aiokafka()}
        admin = AIOKafkaAdminClient(**conf)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            assert topic in await admin.list_topics()
            described = await admin.describe_topics([topic])
            assert len(described[0]["partitions"]) == PARTITIONS
        finally:
            await admin.close()
        producer = AIOKafkaProducer(**conf, acks="all")
        await producer.start()
        try:
            for key, value in records():
                await producer.send(topic, key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **conf, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got = []
        try:
            while len(got) < COUNT:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                got += [(r.key, r.value) for rs in batch.values() for r in rs]
            await consumer.commit()
            committed = [await consumer.committed(tp) for tp in consumer.assignment()]
        finally:
            await consumer.stop()
        return got, committed

    got, committed = asyncio.run(run())
    assert sorted(got) == sorted(records())
    assert sum(committed) == COUNT


def kcat(bootstrap: str, secured: Secured, *args: str, input_text: str | None = None) -> str:
    settings = [arg for key, value in secured.confluent().items()
                for arg in ("-X", f"{key}={value}")]
    result = subprocess.run([require_binary("kcat"), "-b", bootstrap, *settings, *args],
                            input=input_text, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def kcat_round_trip(bootstrap: str, secured: Secured, topic: str) -> None:
    lines = "".join(f"{k.decode()}:{v.decode()}\n" for k, v in records())
    kcat(bootstrap, secured, "-P", "-t", topic, "-K", ":", input_text=lines)  # auto-created
    listed = json.loads(kcat(bootstrap, secured, "-L", "-J"))
    assert topic in {t["topic"] for t in listed["topics"]}
    described = json.loads(kcat(bootstrap, secured, "-L", "-J", "-t", topic))
    assert described["topics"][0]["partitions"]
    out = kcat(bootstrap, secured, "-G", f"g-{topic}", "-X", "auto.offset.reset=earliest",
               "-e", "-q", "-f", "%k:%s\n", topic)
    got = sorted(tuple(x.encode() for x in line.split(":")) for line in out.splitlines())
    assert got == sorted(records())


DRIVERS = {"confluent-kafka": confluent_round_trip, "kafka-python": kafka_python_round_trip,
           "aiokafka": aiokafka_round_trip, "kcat": kcat_round_trip}
