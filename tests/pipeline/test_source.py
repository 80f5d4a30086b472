"""The ``klog`` data source in batch mode on a real local Spark against a real appliance."""

from __future__ import annotations

import time

import pytest

import klog

pytestmark = pytest.mark.slow


def produce(bootstrap, topic, count, *, partitions=6, headers=False, base_ms=None):
    """``count`` records spread round-robin; record i is b"v<i>" with key b"k<i>"."""
    base_ms = base_ms or int(time.time() * 1000) - 3_600_000
    with klog.Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % partitions,
                          timestamp_ms=base_ms + i,
                          headers=[("n", b"%d" % i), ("none", None)] if headers else None)
        producer.flush(30)
    return base_ms


def read(spark, bootstrap, topic, **options):
    reader = spark.read.format("klog").option("bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def rows_of(frame):
    return sorted((r.partition, r.offset, r.key, r.value) for r in frame.collect())


def test_batch_read_returns_every_record_in_the_kafka_source_schema(spark, broker,
                                                                    topic_factory):
    topic = topic_factory(6)
    base = produce(broker.bootstrap, topic, 600, headers=True)
    frame = read(spark, broker.bootstrap, topic, includeHeaders="true")
    assert frame.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                             "timestampType", "headers"]
    assert [f.dataType.simpleString() for f in frame.schema.fields] == [
        "binary", "binary", "string", "int", "bigint", "timestamp", "int",
        "array<struct<key:string,value:binary>>"]
    rows = frame.collect()
    assert len(rows) == 600
    by_value = {bytes(r.value): r for r in rows}
    for i in (0, 1, 599):
        row = by_value[b"v%d" % i]
        assert (bytes(row.key), row.topic, row.partition, row.offset) == (
            b"k%d" % i, topic, i % 6, i // 6)
        assert int(row.timestamp.timestamp() * 1000) == base + i and row.timestampType == 0
        assert [(h.key, h.value) for h in row.headers] == [("n", b"%d" % i), ("none", None)]
    assert sorted(r.offset for r in rows if r.partition == 5) == list(range(100))


def test_min_partitions_twelve_reads_the_same_rows_with_twelve_tasks(spark, broker,
                                                                     topic_factory):
    topic = topic_factory(6)
    produce(broker.bootstrap, topic, 1200)
    default = read(spark, broker.bootstrap, topic)
    split = read(spark, broker.bootstrap, topic, minPartitions=12)
    assert default.rdd.getNumPartitions() == 6
    assert split.rdd.getNumPartitions() == 12
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("min-partitions-12", "minPartitions=12")
    try:
        split_rows = rows_of(split)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    tasks = sum(tracker.getStageInfo(stage).numTasks
                for job in tracker.getJobIdsForGroup("min-partitions-12")
                for stage in tracker.getJobInfo(job).stageIds)
    assert tasks == 12
    assert split_rows == rows_of(default) and len(split_rows) == 1200


def test_offset_and_timestamp_bounds(spark, broker, topic_factory):
    topic = topic_factory(2)
    base = produce(broker.bootstrap, topic, 100, partitions=2)
    window = read(spark, broker.bootstrap, topic, startingTimestamp=base + 10,
                  endingTimestamp=base + 20)
    assert sorted(bytes(r.value) for r in window.collect()) == sorted(
        b"v%d" % i for i in range(10, 20))
    offsets = read(spark, broker.bootstrap, topic,
                   startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2}}}}',
                   endingOffsets=f'{{"{topic}": {{"0": 8, "1": -1}}}}')
    assert rows_of(offsets) == [(0, o, b"k%d" % (2 * o), b"v%d" % (2 * o)) for o in (5, 6, 7)] + [
        (1, o, b"k%d" % (2 * o + 1), b"v%d" % (2 * o + 1)) for o in range(50)]
    late = read(spark, broker.bootstrap, topic, startingTimestamp=base + 10_000,
                startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0


def test_log_append_time_topics_report_timestamp_type_one(spark, broker, topic_factory):
    topic = topic_factory(1, message_timestamp_type="LogAppendTime")
    produce(broker.bootstrap, topic, 5, partitions=1)
    assert {r.timestampType for r in read(spark, broker.bootstrap, topic).collect()} == {1}


def test_offsets_deleted_by_retention_fail_clearly_or_are_skipped(spark, broker,
                                                                  topic_factory):
    topic = topic_factory(1, segment_bytes=4096, retention_bytes=8192)
    with klog.Producer(bootstrap_servers=broker.bootstrap, batch_size=1024) as producer:
        sent = [producer.send(topic, b"x" * 100 + b"%d" % i, partition=0) for i in range(400)]
        producer.flush(30)
    assert sent[-1].result(10).offset == 399  # batches smaller than a segment
    tp = klog.TopicPartition(topic, 0)
    with klog.Consumer(bootstrap_servers=broker.bootstrap) as consumer:
        deadline = time.monotonic() + 20
        while consumer.beginning_offsets([tp])[tp] == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        log_start = consumer.beginning_offsets([tp])[tp]
    assert log_start > 0, "retention did not delete a segment"
    from_zero = f'{{"{topic}": {{"0": 0}}}}'
    with pytest.raises(Exception, match="are no longer in the log"):
        read(spark, broker.bootstrap, topic, startingOffsets=from_zero).collect()
    skipped = read(spark, broker.bootstrap, topic, startingOffsets=from_zero,
                   failOnDataLoss="false").collect()
    assert min(r.offset for r in skipped) >= log_start and max(r.offset for r in skipped) == 399


def test_a_missing_option_is_a_clear_error(spark, broker):
    with pytest.raises(Exception, match="exactly one of the options"):
        spark.read.format("klog").option("bootstrap.servers", broker.bootstrap).load().collect()
