"""aiokafka 0.14 against a real worker: AIOKafkaProducer and AIOKafkaConsumer with assign()."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.interop.helpers import create_topic

pytestmark = pytest.mark.interop


async def _round_trip(bootstrap, topic, count):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    await producer.start()
    try:
        batch = [await producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
                 for i in range(count)]
        await asyncio.gather(*batch)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    got = []
    try:
        partitions = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        while len(got) < count:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            for records in batches.values():
                got.extend((r.key, r.value) for r in records)
    finally:
        await consumer.stop()
    return got


def test_aiokafka_produce_and_assign_consume(appliance):
    topic = "aiokafka"
    create_topic(appliance.bootstrap, topic, 2)
    got = asyncio.run(_round_trip(appliance.bootstrap, topic, 1000))
    assert sorted(got) == sorted((f"k{i}".encode(), f"v{i}".encode()) for i in range(1000))
