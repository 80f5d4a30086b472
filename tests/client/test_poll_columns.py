"""Consumer.poll_columns against a real appliance: the same records as poll, as columns."""

from __future__ import annotations

import time
from array import array

import pytest

import klog
from klog.protocol.records_columns import append_records
from tests.client.test_roundtrip import messages


def columns_from(bootstrap: str, tp: klog.TopicPartition, start: int, count: int,
                 **options) -> klog.RecordColumns:
    """Every record of ``tp`` from ``start`` until ``count`` came, appended into one."""
    merged = klog.RecordColumns()
    parts = []
    deadline = time.monotonic() + 30
    with klog.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="none",
                       **options) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        got = 0
        while got < count and time.monotonic() < deadline:
            columns = consumer.poll_columns(timeout_ms=500).get(tp)
            if columns is not None:
                parts.append(columns)
                got += len(columns)
        assert consumer.position(tp) == start + got
    for columns in parts:
        append_records(merged, columns.records())
    return merged


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_poll_columns_gives_the_records_poll_gives_from_mid_batch(broker, topic_factory,
                                                                  codec):
    topic = topic_factory(1)
    sent = messages(seed=7, count=3000)
    with klog.Producer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                       linger_ms=5, batch_size=16384) as producer:
        for key, value, headers in sent:
            producer.send(topic, value, key=key, headers=headers, partition=0)
    tp = klog.TopicPartition(topic, 0)
    start = 1234  # inside a batch: the records before it must not come back
    columns = columns_from(broker.bootstrap, tp, start, len(sent) - start)
    records = columns.records()
    assert [r.offset for r in records] == list(range(start, len(sent)))
    assert [(r.key, r.value, r.headers) for r in records] == [
        (k, v, list(h or [])) for k, v, h in sent[start:]]
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none",
                       consumer_timeout_ms=10_000) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        polled = [r for _, r in zip(range(len(sent) - start), consumer)]
    assert [r.timestamp for r in records] == [r.timestamp for r in polled]
    assert array("q", columns.timestamps).tolist() == [r.timestamp for r in polled]
    assert columns.timestamp_types == bytes(len(records))  # CreateTime


def test_poll_columns_stamps_log_append_time_batches(broker, topic_factory):
    topic = topic_factory(1, **{"message.timestamp.type": "LogAppendTime"})
    with klog.Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as producer:
        for i in range(500):
            producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=1000 + i)
    tp = klog.TopicPartition(topic, 0)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 0)
        parts = []
        while sum(map(len, parts)) < 500:
            parts.extend(c.poll_columns(timeout_ms=2000).values())
    for columns in parts:
        assert columns.timestamp_types == b"\x01" * len(columns)
        stamps = array("q", columns.timestamps)
        assert min(stamps) > 1_000_000_000_000  # the broker's clock, not the producer's


def test_poll_columns_raises_out_of_range_without_reset(broker, topic_factory):
    topic = topic_factory(1)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send(topic, b"only", partition=0).result(timeout=30)
    tp = klog.TopicPartition(topic, 0)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 50)
        with pytest.raises(klog.OffsetOutOfRangeError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll_columns(timeout_ms=500)
