"""The consumer's fast paths against a real appliance: each gives what the plain path gives.

``AIOConsumer.poll_columns`` (issue 26) reads the same records as the blocking consumer's
``poll_columns`` and as ``poll``: offsets, keys, values, headers and timestamps, from the
middle of a batch on, and leaves the position after the last record it gave.
"""

from __future__ import annotations

import asyncio
import time

import klog
import klog.aio
from klog.protocol.records_columns import append_records
from tests.client.test_poll_columns import columns_from
from tests.client.test_roundtrip import messages


async def aio_columns_from(bootstrap: str, tp: klog.TopicPartition, start: int,
                           count: int) -> tuple[klog.RecordColumns, int]:
    """Every record of ``tp`` from ``start`` until ``count`` came, through the asyncio
    consumer's poll_columns, appended into one; with the position afterwards."""
    merged = klog.RecordColumns()
    deadline = time.monotonic() + 30
    async with klog.aio.AIOConsumer(bootstrap_servers=bootstrap,
                                    auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        got = 0
        while got < count and time.monotonic() < deadline:
            columns = (await consumer.poll_columns(timeout_ms=500)).get(tp)
            if columns is not None:
                append_records(merged, columns.records())
                got += len(columns)
        return merged, await consumer.position(tp)


def test_aio_poll_columns_gives_what_the_blocking_consumer_gives(broker, topic_factory):
    topic = topic_factory(1)
    sent = messages(seed=26, count=3000)
    with klog.Producer(bootstrap_servers=broker.bootstrap, linger_ms=5,
                       batch_size=16384) as producer:
        for key, value, headers in sent:
            producer.send(topic, value, key=key, headers=headers, partition=0)
    tp = klog.TopicPartition(topic, 0)
    start = 1234  # inside a batch: the records before it must not come back
    ours, position = asyncio.run(asyncio.wait_for(
        aio_columns_from(broker.bootstrap, tp, start, len(sent) - start), 60))
    theirs = columns_from(broker.bootstrap, tp, start, len(sent) - start)
    records = ours.records()
    assert position == len(sent)
    assert [r.offset for r in records] == list(range(start, len(sent)))
    assert [(r.key, r.value, r.headers) for r in records] == [
        (k, v, list(h or [])) for k, v, h in sent[start:]]
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs.records()]
    assert bytes(ours.timestamps) == bytes(theirs.timestamps)
