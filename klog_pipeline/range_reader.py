"""Executor side: one offset range of one partition, read with `klog.Consumer`, as Arrow
record batches in the ``klog`` source's schema (Spark's Kafka source schema).

Why Arrow: Spark takes a yielded ``pyarrow.RecordBatch`` as a whole, while yielded tuples are
converted row by row. And no Python object per record on the way: the client hands back each
poll's records as columns (``Consumer.poll_columns``: the compiled decoder appends whole
batches to Arrow-layout buffers), which become Arrow arrays without a copy
(``pa.Array.from_buffers``); topic and partition are constants of the chunk, and so is the
timestamp type unless the topic's changed inside it.

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
import pyarrow.compute as pc

from klog import Consumer, OffsetOutOfRangeError, RecordColumns, TopicPartition
from klog_pipeline.options import SourceOptions
from klog_pipeline.planning import DataLossError, OffsetRange, data_loss_message

log = logging.getLogger("klog_pipeline")

POLL_MS = 200
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
    order, as record batches of at most one poll each."""
    if not isinstance(span, OffsetRange) or span.size == 0:
        return
    tp = TopicPartition(span.topic, span.partition)
    settings = {"client_id": "klog-spark", **options.consumer_options(),
                "auto_offset_reset": "none"}
    with Consumer(bootstrap_servers=options.bootstrap_servers, **settings) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, span.start)
        position = span.start
        progress_at = time.monotonic()
        while position < span.end:
            try:
                columns = consumer.poll_columns(timeout_ms=POLL_MS).get(tp)
            except OffsetOutOfRangeError:
                position = _after_data_loss(consumer, tp, position, options)
                consumer.seek(tp, position)
                continue
            if columns:
                batch = to_batch(columns, span.end, span.topic, span.partition,
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


def to_batch(columns: RecordColumns, end: int, topic: str, partition: int,
             include_headers: bool) -> pa.RecordBatch:
    """Arrow columns of ``columns`` (one partition's, in offset order) below offset
    ``end``: the buffers are wrapped, not copied (keys and values are cast from large_binary
    to the schema's binary, which rewrites only their offsets)."""
    total = len(columns)
    offsets = pa.Array.from_buffers(pa.int64(), total, [None, pa.py_buffer(columns.offsets)])
    count = bisect_left(memoryview(columns.offsets).cast("q"), end)
    stamps = pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), total,
                                   [None, pa.py_buffer(columns.timestamps)])
    arrays = [
        _binary(columns.key_offsets, columns.keys, columns.key_valid, total),
        _binary(columns.value_offsets, columns.values, columns.value_valid, total),
        pa.repeat(pa.scalar(topic, pa.string()), total),
        pa.repeat(pa.scalar(partition, pa.int32()), total),
        offsets,
        stamps.cast(TIMESTAMP),
        _timestamp_types(columns.timestamp_types, total),
    ]
    schema = SCHEMA
    if include_headers:
        arrays.append(pa.array([h or [] for h in columns.headers], HEADERS))
        schema = SCHEMA_WITH_HEADERS
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return batch if count == total else batch.slice(0, count)


def _binary(ends: bytearray, data: bytearray, valid: bytearray, count: int) -> pa.Array:
    """A large_binary column of the decoder's buffers, as the schema's binary."""
    bitmap = None
    if 0 in valid:  # some nulls: the byte per record becomes Arrow's bitmap
        bytes_ = pa.Array.from_buffers(pa.uint8(), count, [None, pa.py_buffer(valid)])
        bitmap = pc.cast(bytes_, pa.bool_()).buffers()[1]
    column = pa.Array.from_buffers(pa.large_binary(), count,
                                   [bitmap, pa.py_buffer(ends), pa.py_buffer(data)])
    return column.cast(pa.binary())


def _timestamp_types(kinds: bytearray, count: int) -> pa.Array:
    """0 CreateTime / 1 LogAppendTime: a constant of the chunk unless the topic's timestamp
    type changed inside it (then per record)."""
    if 1 not in kinds:
        return pa.repeat(pa.scalar(0, pa.int32()), count)
    if 0 not in kinds:
        return pa.repeat(pa.scalar(1, pa.int32()), count)
    return pa.Array.from_buffers(pa.uint8(), count, [None, pa.py_buffer(kinds)]).cast(pa.int32())
