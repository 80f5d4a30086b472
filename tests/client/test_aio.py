"""klog.aio through a real appliance: the round trips of test_roundtrip, in asyncio."""

from __future__ import annotations

import asyncio
import time

import pytest

import klog
import klog.aio
from tests.client.test_roundtrip import CODECS, messages


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def read_all(bootstrap, topic, count, **options):
    async with klog.aio.AIOConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    consumer_timeout_ms=30_000, **options) as consumer:
        partitions = await consumer.partitions_for_topic(topic)
        consumer.assign([klog.TopicPartition(topic, p) for p in partitions])
        records = []
        async for record in consumer:
            records.append(record)
            if len(records) >= count:
                break
        return records


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips(broker, topic_factory, codec):
    topic = topic_factory(3)
    sent = messages(seed=10 + CODECS.index(codec), count=2000)

    async def scenario():
        async with klog.aio.AIOProducer(bootstrap_servers=broker.bootstrap,
                                        compression_type=codec, linger_ms=2,
                                        batch_size=8192) as producer:
            handles = [await producer.send(topic, v, key=k, headers=h) for k, v, h in sent]
            metadata = [await h for h in handles]
        return metadata, await read_all(broker.bootstrap, topic, len(sent))

    metadata, got = run(scenario())
    by_place = {(r.partition, r.offset): r for r in got}
    assert len(by_place) == len(sent)
    for (key, value, headers), where in zip(sent, metadata):
        record = by_place[(where.partition, where.offset)]
        assert (record.key, record.value, record.headers) == (key, value, list(headers or []))


def test_send_batch_send_nowait_and_lookups(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)

    async def scenario():
        async with klog.aio.AIOProducer(bootstrap_servers=broker.bootstrap) as producer:
            with pytest.raises(klog.errors.WouldBlockError):
                producer.send_nowait(topic, b"before metadata")
            batch = await (await producer.send_batch(topic, [b"a", b"b", b"c"]))
            nowait = await producer.send_nowait(topic, b"d", timestamp_ms=4_000_000_000_000)
        assert [m.offset for m in batch] + [nowait.offset] == [0, 1, 2, 3]
        async with klog.aio.AIOConsumer(bootstrap_servers=broker.bootstrap) as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 4
            assert await consumer.end_offsets([tp]) == {tp: 4}
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            found = await consumer.offsets_for_times({tp: 4_000_000_000_000})
            assert found == {tp: klog.OffsetAndTimestamp(3, 4_000_000_000_000)}
            consumer.seek(tp, 1)
            polled = await consumer.poll(timeout_ms=10_000, max_records=2)
            assert [r.value for r in polled[tp]] == [b"b", b"c"]
            assert await consumer.position(tp) == 3

    run(scenario())


def test_async_iteration_wakes_on_append(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)

    async def scenario():
        async with klog.aio.AIOConsumer(bootstrap_servers=broker.bootstrap,
                                        fetch_max_wait_ms=10_000) as consumer, \
                klog.aio.AIOProducer(bootstrap_servers=broker.bootstrap,
                                     linger_ms=0) as producer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 0
            stream = consumer.__aiter__()
            waiting = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.3)
            assert not waiting.done()
            started = time.perf_counter()
            await (await producer.send(topic, b"ping"))
            record = await waiting
            return record, (time.perf_counter() - started) * 1000

    record, elapsed_ms = run(scenario())
    print(f"\nasyncio iterator: record {elapsed_ms:.1f} ms after send()")
    assert record.value == b"ping" and elapsed_ms < 3000  # not the 10 s long poll
