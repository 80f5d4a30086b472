"""Executor side: one offset range of one partition, read with `klog.Consumer`, as Arrow
record batches in the ``klog`` source's schema (Spark's Kafka source schema).

Why Arrow: Spark takes a yielded ``pyarrow.RecordBatch`` as a whole, while yielded tuples are
converted row by row. So the per-record Python work stops at the client's decoder: each
fetched chunk of records is transposed once (``zip(*records)``, in C) and its columns built
by pyarrow; topic, partition and timestamp type are constants of the chunk.

The consumer runs without a group and with ``auto_offset_reset="none"``, so an offset that
retention deleted between planning and reading is an error, never a silent jump: it fails the
task with a message naming the lost offsets, or (``failOnDataLoss=false``) is logged and
skipped. A partition that makes no progress for ``kafkaConsumer.pollTimeoutMs`` fails too.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Iterator

import pyarrow as pa

from klog import Consumer, OffsetOutOfRangeError, TopicPartition
from pipeline.options import SourceOptions
from pipeline.planning import DataLossError, OffsetRange, data_loss_message

log = logging.getLogger("pipeline")

POLL_MS = 200
MAX_RECORDS = 100_000
TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", TIMESTAMP),
    ("timestampType", pa.int32()),
])
SCHEMA_WITH_HEADERS = SCHEMA.append(pa.field("headers", HEADERS))
DDL = ("key binary, value binary, topic string, partition int, offset long, "
       "timestamp timestamp, timestampType int")
DDL_WITH_HEADERS = DDL + ", headers array<struct<key:string,value:binary>>"


def read_range(options: SourceOptions, span) -> Iterator[pa.RecordBatch]:
    """The records of ``span`` (an OffsetRange; anything else reads nothing), in offset
    order, as record batches of at most one fetch each."""
    if not isinstance(span, OffsetRange) or span.size == 0:
        return
    tp = TopicPartition(span.topic, span.partition)
    settings = {"client_id": "klog-spark", "max_poll_records": MAX_RECORDS,
                **options.consumer_options(), "auto_offset_reset": "none"}
    with Consumer(bootstrap_servers=options.bootstrap_servers, **settings) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, span.start)
        position = span.start
        progress_at = time.monotonic()
        while position < span.end:
            try:
                records = consumer.poll(timeout_ms=POLL_MS).get(tp)
            except OffsetOutOfRangeError:
                position = _after_data_loss(consumer, tp, position, options)
                consumer.seek(tp, position)
                continue
            if records:
                batch = to_batch(records, span.end, span.topic, span.partition,
                                 options.include_headers)
                if batch.num_rows:
                    yield batch
            moved = consumer.position(tp)
            if moved > position:
                position, progress_at = moved, time.monotonic()
            elif (time.monotonic() - progress_at) * 1000 > options.poll_timeout_ms:
                raise TimeoutError(f"klog: no records of {span.topic}[{span.partition}] at "
                                   f"offset {position} within {options.poll_timeout_ms} ms "
                                   f"(reading {span.start}..{span.end - 1})")


def _after_data_loss(consumer: Consumer, tp: TopicPartition, position: int,
                     options: SourceOptions) -> int:
    log_start = consumer.beginning_offsets([tp])[tp]
    message = data_loss_message(tp.topic, tp.partition, position, log_start)
    if options.fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s", message)
    return max(position, log_start)


def to_batch(records: list, end: int, topic: str, partition: int,
             include_headers: bool) -> pa.RecordBatch:
    """Columns of ``records`` (one partition's, in offset order) below offset ``end``."""
    offsets, timestamps, keys, values, headers = zip(*records)
    count = len(offsets)
    if offsets[-1] >= end:
        count = bisect_left(offsets, end)
        offsets, timestamps, keys, values, headers = (
            offsets[:count], timestamps[:count], keys[:count], values[:count], headers[:count])
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP),
        _timestamp_types(records, count),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADERS))
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA_WITH_HEADERS)
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _timestamp_types(records: list, count: int) -> pa.Array:
    """0 CreateTime / 1 LogAppendTime: a constant of the chunk unless the topic's timestamp
    type changed inside it (then per record)."""
    kinds = set(map(type, records[:count]))
    if len(kinds) == 1:
        return pa.repeat(pa.scalar(kinds.pop().timestamp_type, pa.int32()), count)
    return pa.array([r.timestamp_type for r in records[:count]], pa.int32())
