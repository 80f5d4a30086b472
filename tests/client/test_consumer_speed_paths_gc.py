"""Iteration frees a finished chunk before the next one is decoded (issue 26).

A chunk is one fetch's records. While the next fetch is decoded, the young collections
that its allocations trigger walk every tracked record still alive and promote them; when
the finished chunk was still held (by the iterator's locals and cursor) that was most of
the consumer's CPU per record (1.21 against 0.66 us measured). These tests see it from the
inside: a value deserializer runs during a decode, and checks (through a weak reference)
whether the previous chunk's records are still alive then. One appliance for the module,
a few seconds.
"""

from __future__ import annotations

import asyncio
import weakref

import klog
import klog.aio


class Value:
    """A deserialized value that can be referred to weakly (bytes cannot)."""

    __slots__ = ("raw", "__weakref__")

    def __init__(self, raw: bytes):
        self.raw = raw


def fill(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records, one batch each: with a 1-byte fetch limit, one chunk each."""
    with klog.Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, partition=0).result(30)


class Watch:
    """The deserializer: at each decode, was the value handed out before still alive?"""

    def __init__(self):
        self.previous = None
        self.alive_during_next_decode: list[bool] = []

    def __call__(self, raw: bytes) -> Value:
        if self.previous is not None:
            self.alive_during_next_decode.append(self.previous() is not None)
        value = Value(raw)
        self.previous = weakref.ref(value)
        return value


OPTIONS = {"auto_offset_reset": "earliest", "max_partition_fetch_bytes": 1,
           "consumer_timeout_ms": 10_000}


def test_the_blocking_iterator_frees_a_chunk_before_decoding_the_next(broker, topic_factory):
    topic = topic_factory(1)
    fill(broker.bootstrap, topic, 6)
    watch = Watch()
    with klog.Consumer(bootstrap_servers=broker.bootstrap, value_deserializer=watch,
                       **OPTIONS) as consumer:
        consumer.assign([klog.TopicPartition(topic, 0)])
        offsets = []
        for record in consumer:
            offsets.append(record.offset)
            del record  # the application keeps nothing
            if len(offsets) == 6:
                break
    assert offsets == list(range(6))
    assert len(watch.alive_during_next_decode) == 5
    assert not any(watch.alive_during_next_decode)


def test_the_asyncio_iterator_frees_a_chunk_before_decoding_the_next(broker, topic_factory):
    topic = topic_factory(1)
    fill(broker.bootstrap, topic, 6)
    watch = Watch()

    async def read() -> list[int]:
        offsets = []
        async with klog.aio.AIOConsumer(bootstrap_servers=broker.bootstrap,
                                        value_deserializer=watch, **OPTIONS) as consumer:
            consumer.assign([klog.TopicPartition(topic, 0)])
            async for record in consumer:
                offsets.append(record.offset)
                del record
                if len(offsets) == 6:
                    break
        return offsets

    assert asyncio.run(asyncio.wait_for(read(), 60)) == list(range(6))
    assert len(watch.alive_during_next_decode) == 5
    assert not any(watch.alive_during_next_decode)
