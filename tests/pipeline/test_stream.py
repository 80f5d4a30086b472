"""The ``klog`` streaming reader: ``trigger(availableNow=True)`` runs with a checkpoint
deliver every record exactly once across runs."""

from __future__ import annotations

import pytest

import klog

pytestmark = pytest.mark.slow


def produce(bootstrap, topic, first, count, partitions=6):
    with klog.Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(first, first + count):
            producer.send(topic, b"e%d" % i, partition=i % partitions)
        producer.flush(30)


def run_available_now(spark, bootstrap, topic, sink, checkpoint, **options):
    reader = (spark.readStream.format("klog").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().select("partition", "offset", "value").writeStream
             .format("parquet").option("path", str(sink))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return [p for p in query.recentProgress if p["numInputRows"]]


def test_available_now_delivers_every_record_once_across_two_runs(spark, broker, topic_factory,
                                                                  tmp_path):
    topic = topic_factory(6)
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    produce(broker.bootstrap, topic, 0, 600)
    first = run_available_now(spark, broker.bootstrap, topic, sink, checkpoint)
    assert sum(p["numInputRows"] for p in first) == 600
    produce(broker.bootstrap, topic, 600, 300)
    second = run_available_now(spark, broker.bootstrap, topic, sink, checkpoint,
                               maxOffsetsPerTrigger=100)
    assert sum(p["numInputRows"] for p in second) == 300
    assert len(second) == 3  # the cap split the backlog into micro-batches of 100
    rows = spark.read.parquet(str(sink)).collect()
    assert len(rows) == 900
    assert sorted(bytes(r.value) for r in rows) == sorted(b"e%d" % i for i in range(900))
    assert len({(r.partition, r.offset) for r in rows}) == 900
