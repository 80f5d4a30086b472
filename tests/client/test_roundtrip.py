"""klog.Producer to klog.Consumer through a real appliance: codecs, keys, headers, seeks."""

from __future__ import annotations

import random
import time

import pytest

import klog
from tests.client.conftest import read_all

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def messages(seed: int, count: int):
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 5 == 0 else f"key-{rnd.randrange(50)}".encode()
        value = rnd.randbytes(rnd.randrange(0, 300)) if i % 7 else None
        headers = [("n", str(i).encode()), ("empty", None)] if i % 3 == 0 else None
        out.append((key, value, headers))
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_keys_values_headers(broker, topic_factory, codec):
    topic = topic_factory(3)
    sent = messages(seed=CODECS.index(codec), count=2000)
    with klog.Producer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                       linger_ms=2, batch_size=8192) as producer:
        futures = [producer.send(topic, v, key=k, headers=h) for k, v, h in sent]
        metadata = [f.result(timeout=30) for f in futures]
    got = read_all(broker.bootstrap, topic, len(sent))
    by_place = {(r.partition, r.offset): r for r in got}
    assert len(by_place) == len(sent)
    for (key, value, headers), where in zip(sent, metadata):
        record = by_place[(where.partition, where.offset)]
        assert (record.key, record.value) == (key, value)
        assert record.headers == list(headers or [])
        assert record.timestamp == where.timestamp and record.topic == topic
    per_partition = {}
    for where in metadata:  # per partition, offsets follow send order
        assert where.offset > per_partition.get(where.partition, -1)
        per_partition[where.partition] = where.offset


def test_send_batch_lands_in_order_on_one_partition(broker, topic_factory):
    topic = topic_factory(4)
    values = [b"m%03d" % i for i in range(50)]
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        metadata = producer.send_batch(topic, values, key=b"same").result(timeout=30)
    assert len({m.partition for m in metadata}) == 1
    offsets = [m.offset for m in metadata]
    assert offsets == list(range(offsets[0], offsets[0] + 50))
    got = read_all(broker.bootstrap, topic, 50, partitions=[metadata[0].partition])
    assert [r.value for r in got] == values and {r.key for r in got} == {b"same"}


def test_serializers_and_explicit_partition_and_timestamp(broker, topic_factory):
    topic = topic_factory(2)
    with klog.Producer(bootstrap_servers=broker.bootstrap, value_serializer=str.encode,
                       key_serializer=str.encode, acks=1) as producer:
        meta = producer.send(topic, "hello", key="k", partition=1,
                             timestamp_ms=1_600_000_000_000).result(timeout=30)
    assert (meta.partition, meta.timestamp) == (1, 1_600_000_000_000)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                       value_deserializer=bytes.decode) as consumer:
        consumer.assign([(topic, 1)])
        (record,) = consumer.poll(timeout_ms=10_000)[klog.TopicPartition(topic, 1)]
    assert (record.value, record.key, record.timestamp) == ("hello", b"k", 1_600_000_000_000)


def test_seek_positions_and_offset_lookups(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(100):
            producer.send(topic, b"early-%d" % i, timestamp_ms=1_000_000 + i)
        producer.flush(30)
        for i in range(100):
            producer.send(topic, b"late-%d" % i, timestamp_ms=2_000_000 + i)
    with klog.Consumer(bootstrap_servers=broker.bootstrap) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 200  # auto_offset_reset latest
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 200}
        found = consumer.offsets_for_times({tp: 2_000_000})
        assert found == {tp: klog.OffsetAndTimestamp(100, 2_000_000)}
        assert consumer.offsets_for_times({tp: 3_000_000}) == {tp: None}
        consumer.seek(tp, found[tp].offset)
        batch = consumer.poll(timeout_ms=10_000, max_records=10)
        assert [r.value for r in batch[tp]] == [b"late-%d" % i for i in range(10)]
        assert consumer.position(tp) == 110
        consumer.seek_to_beginning()
        assert consumer.poll(timeout_ms=10_000, max_records=1)[tp][0].offset == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 200
        assert consumer.poll(timeout_ms=200) == {}


def test_auto_offset_reset_on_out_of_range(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send_batch(topic, [b"a", b"b", b"c"]).result(timeout=30)
    with klog.Consumer(bootstrap_servers=broker.bootstrap,
                       auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        assert [r.value for r in consumer.poll(timeout_ms=10_000)[tp]] == [b"a", b"b", b"c"]
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        with pytest.raises(klog.NoOffsetForPartitionError):
            consumer.poll(timeout_ms=100)
        consumer.seek(tp, 1000)
        with pytest.raises(klog.OffsetOutOfRangeError, match=topic):
            consumer.poll(timeout_ms=10_000)


def test_iteration_blocks_then_yields_a_new_record_within_milliseconds(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=10_000,
                       consumer_timeout_ms=30_000) as consumer, \
            klog.Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
        consumer.assign([tp])
        assert consumer.position(tp) == 0
        assert consumer.poll(timeout_ms=300) == {}  # a long-poll fetch is now waiting
        stream = iter(consumer)
        latencies = []
        for i in range(5):
            producer.send(topic, b"now-%d" % i).result(timeout=10)
            appended = time.perf_counter()
            record = next(stream)
            latencies.append((time.perf_counter() - appended) * 1000)
            assert record.value == b"now-%d" % i
    print(f"\niterator wake-up after append: {', '.join(f'{ms:.1f}' for ms in latencies)} ms")
    # woken by the append, not by the 10 s long poll expiring (generous: CI machines are busy)
    assert max(latencies) < 3000, latencies


def test_the_consumer_reads_while_a_producer_writes(broker, topic_factory):
    topic = topic_factory(2)
    total = 20_000
    with klog.Producer(bootstrap_servers=broker.bootstrap, acks=1) as producer:
        for i in range(total):
            producer.send(topic, b"%d" % i)
        got = read_all(broker.bootstrap, topic, total)
    assert sorted(int(r.value) for r in got) == list(range(total))


def test_errors_name_topic_partition_and_broker(broker, topic_factory):
    with klog.Consumer(bootstrap_servers=broker.bootstrap) as consumer, pytest.raises(
            klog.UnknownTopicOrPartitionError, match="no-such-topic"):
        consumer.partitions_for_topic("no-such-topic")
    with klog.Producer(bootstrap_servers=broker.bootstrap, max_request_size=1000) as producer, \
            pytest.raises(klog.MessageSizeTooLargeError, match="max_request_size"):
        producer.send("whatever", b"x" * 2000)
    producer.close()
    with pytest.raises(klog.ClosedError):
        producer.send("whatever", b"x")
    with pytest.raises(klog.KafkaTimeoutError, match="cannot connect"), klog.Producer(
            bootstrap_servers="127.0.0.1:1", max_block_ms=500) as dead:
        dead.send("t", b"x")


def test_a_batch_above_the_topics_limit_fails_saying_what_to_change(broker, topic_factory):
    topic = topic_factory(1, max_message_bytes=20_000)
    values = [b"v" * 200] * 200  # one batch of ~43 KB at the default batch_size
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer, pytest.raises(
            klog.MessageSizeTooLargeError, match=r"max.message.bytes.*batch of 200 records.*"
                                                 r"set batch_size \(now 1000000\) below"):
        producer.send_batch(topic, values).result(timeout=30)
    with klog.Producer(bootstrap_servers=broker.bootstrap, batch_size=16_384) as producer:
        assert len(producer.send_batch(topic, values).result(timeout=30)) == 200


def test_position_follows_iteration_record_by_record(broker, topic_factory):
    topic = topic_factory(1)
    tp = klog.TopicPartition(topic, 0)
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send_batch(topic, [b"r%d" % i for i in range(20)]).result(timeout=30)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10_000) as consumer:
        consumer.assign([tp])
        for count, record in enumerate(consumer, 1):
            assert consumer.position(tp) == record.offset + 1
            if count == 3:
                break
        assert consumer.position(tp) == 3
        consumer.seek(tp, 10)  # cuts the chunk being iterated
        assert next(consumer).offset == 10
        assert [r.offset for r in consumer.poll(timeout_ms=5000)[tp]] == list(range(11, 20))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_each_acks_setting_delivers(broker, topic_factory, acks):
    topic = topic_factory(2)
    with klog.Producer(bootstrap_servers=broker.bootstrap, acks=acks, linger_ms=1) as producer:
        futures = [producer.send(topic, b"a%d" % i) for i in range(500)]
        metadata = [f.result(timeout=30) for f in futures]
    if acks == 0:
        assert {m.offset for m in metadata} == {-1}  # the broker says nothing
    else:
        assert len({(m.partition, m.offset) for m in metadata}) == 500
    got = read_all(broker.bootstrap, topic, 500)
    assert sorted(r.value for r in got) == sorted(b"a%d" % i for i in range(500))
