"""Real clients for the compaction acceptance tests: confluent-kafka writes updates and
remembers where each landed; confluent-kafka, kafka-python and aiokafka read a partition from
the beginning to its end."""

from __future__ import annotations

import asyncio
import random

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def write_updates(bootstrap: str, topic: str, count: int, keys: int, *, seed: int,
                  tombstone_every: int = 0, timestamp_ms: int | None = None,
                  prefix: str = "") -> dict[int, Record]:
    """`count` updates of `keys` keys, acknowledged; returns offset -> (offset, key, value)
    as the delivery reports said."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "enable.idempotence": True, "batch.num.messages": 500,
                         "batch.size": 32768})
    written: dict[int, Record] = {}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            written[msg.offset()] = (msg.offset(), msg.key(), msg.value())

    for n in range(count):
        key = f"key-{rng.randrange(keys)}".encode()
        value = None if tombstone_every and n % tombstone_every == 0 else \
            f"{prefix}value-{seed}-{n}".encode()
        extra = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=0,
                                 on_delivery=delivered, **extra)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return written


def read_confluent(bootstrap: str, topic: str, end: int) -> list[Record]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-readers",
                         "enable.auto.commit": False, "check.crcs": True,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Record] = []
    try:
        while not got or got[-1][0] < end - 1:
            msg = consumer.poll(10)
            assert msg is not None, f"nothing more after {got[-1:] }"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if got and got[-1][0] >= end - 1:
                    break
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def read_kafka_python(bootstrap: str, topic: str, end: int) -> list[Record]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000, check_crcs=True)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for r in consumer:
        got.append((r.offset, r.key, r.value))
        if r.offset >= end - 1:
            break
    consumer.close()
    return got


def read_aiokafka(bootstrap: str, topic: str, end: int) -> list[Record]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    check_crcs=True)
        await consumer.start()
        got = []
        try:
            partition = ATopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            while not got or got[-1][0] < end - 1:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for records in batches.values():
                    got.extend((r.offset, r.key, r.value) for r in records)
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def assert_compacted_view(got: list[Record], written: dict[int, Record]) -> None:
    """Offsets grow; every record read is one written, at its own offset."""
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
    for record in got:
        if written.get(record[0]) != record:
            raise AssertionError(_not_written(record, got, written))


def _not_written(record: Record, got: list[Record], written: dict[int, Record]) -> str:
    """What a reader needs when a record read is not the one acknowledged at its offset:
    what was acknowledged there, where else this record was acknowledged (a retry appended
    twice), and the neighbourhood on both sides."""
    offset = record[0]
    elsewhere = sorted(o for o, r in written.items() if r[1:] == record[1:] and o != offset)
    near = [o for o in sorted(written) if abs(o - offset) <= 5]
    read_near = [r for r in got if abs(r[0] - offset) <= 5]
    return (f"read {record}; acknowledged at {offset}: {written.get(offset)}; the same key "
            f"and value acknowledged at {elsewhere[:5]}; acknowledged offsets near it: {near}; "
            f"read near it: {read_near}; {len(written)} acknowledged up to {max(written)}")


def latest_by_key(written: dict[int, Record]) -> dict[bytes, Record]:
    latest = {}
    for offset in sorted(written):
        latest[written[offset][1]] = written[offset]
    return latest
