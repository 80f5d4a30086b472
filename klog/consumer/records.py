"""Fetched bytes into ConsumerRecords: the consumer's per-record hot path.

A :class:`CompletedFetch` is one partition's record bytes from one Fetch answer, kept
undecoded until the application asks for records, so the next fetch can be sent first.
Where the next fetch starts is read from the batch headers alone (:func:`next_fetch_offset`),
without decoding a record. :func:`decode` turns the bytes into ConsumerRecords: the codec
builds them directly as the partition's ConsumerRecord class (see `klog.types`; no
per-record conversion), control batches are skipped, records before the fetch position (a
batch fetched from its middle) dropped. :func:`decode_columns` does the same into columns
(`klog.protocol.records_columns`), for readers that want arrays, not records.
"""

from __future__ import annotations

from itertools import repeat

from klog.protocol.record_batch import (
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    scan_batches,
)
from klog.protocol.records import decode_batches
from klog.protocol.records_columns import RecordColumns, decode_into_columns
from klog.types import ConsumerRecord, TopicPartition

_new = tuple.__new__


class CompletedFetch:
    __slots__ = ("tp", "fetch_offset", "data", "next_offset", "generation")

    def __init__(self, tp: TopicPartition, fetch_offset: int, data: bytes, next_offset: int,
                 generation: int):
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.data = data
        self.next_offset = next_offset
        self.generation = generation


def next_fetch_offset(data) -> int | None:
    """The offset after the last whole batch in ``data`` (None: no whole batch)."""
    found = next_fetch_position(data)
    return None if found is None else found[0]


def next_fetch_position(data) -> tuple[int, int] | None:
    """(the offset after the last whole batch in ``data``, that batch's leader epoch), or
    None without a whole batch. The epoch is what the position is validated with after a
    leader change (OffsetForLeaderEpoch, KIP-320)."""
    last = None
    for _, header in scan_batches(data, verify_crc=False):
        last = header
    if last is None:
        return None
    return last.base_offset + last.last_offset_delta + 1, last.partition_leader_epoch


def drop_aborted(data: bytes, aborted) -> bytes:
    """``data`` without the batches of aborted transactions (a read_committed fetch).

    Kafka's consumer rule, per batch, not per record: ``aborted`` is the answer's
    ``aborted_transactions`` (producer id, first offset). A producer's transaction counts as
    aborted from its first offset on, until that producer's next control batch (its ABORT
    marker) ends it; its transactional data batches in between are dropped. Control batches
    stay (the decoders skip them, and positions move past them). Returns ``data`` itself
    when nothing is dropped."""
    pending = sorted((entry.first_offset, entry.producer_id) for entry in aborted)
    index, open_ids = 0, set()
    kept: list = []
    start = 0  # the first byte of the run of batches kept so far
    dropped = False
    view = memoryview(data)
    end = 0
    for pos, header in scan_batches(data, verify_crc=False):
        end = pos + header.size
        last = header.base_offset + header.last_offset_delta
        while index < len(pending) and pending[index][0] <= last:
            open_ids.add(pending[index][1])
            index += 1
        producer_id = header.producer_id
        if producer_id not in open_ids:
            continue
        if header.attributes & CONTROL_BIT:
            open_ids.discard(producer_id)  # the abort marker: the transaction is over
        elif header.attributes & TRANSACTIONAL_BIT:
            if pos > start:
                kept.append(view[start:pos])
            start = end
            dropped = True
    if not dropped:
        return data
    kept.append(view[start:])
    return b"".join(kept)


def decode(fetch: CompletedFetch, *, check_crcs: bool = True,
           key_deserializer=None, value_deserializer=None) -> list[ConsumerRecord]:
    """The records of ``fetch`` at or after its fetch offset. Raises CorruptBatchError.

    Pausing the cyclic GC while a fetch is decoded was tried (issue 26) and measured slower
    in the consumer (0.78 against 0.66 us of CPU per record), probably because the paused
    allocations make a young collection due as soon as the GC is back, which then finds the
    whole fetch alive and promotes it. What helps is that the previous chunk is freed
    before the next is decoded (the iterators do it): collections during a decode then find
    little alive."""
    return _decode(fetch, check_crcs, key_deserializer, value_deserializer)


def _decode(fetch: CompletedFetch, check_crcs: bool, key_deserializer, value_deserializer):
    topic, partition = fetch.tp
    position = fetch.fetch_offset
    out: list[ConsumerRecord] = []
    create_time = ConsumerRecord.class_for(topic, partition, 0)
    for header, records in decode_batches(fetch.data, verify_crc=check_crcs, skip_control=True,
                                          record_type=create_time):
        if header.attributes & TIMESTAMP_TYPE_BIT:  # rare: LogAppendTime topics
            cls = ConsumerRecord.class_for(topic, partition, 1)
            records = list(map(_new, repeat(cls, len(records)), records))
        if header.base_offset < position:
            records = [r for r in records if r.offset >= position]
        if out:
            out.extend(records)
        else:
            out = records
    if key_deserializer is not None or value_deserializer is not None:
        out = [_deserialized(r, key_deserializer, value_deserializer) for r in out]
    return out


def decode_columns(fetch: CompletedFetch, columns: RecordColumns, *,
                   check_crcs: bool = True) -> int:
    """Append the records of ``fetch`` at or after its fetch offset to ``columns`` (no
    Python object per record); returns how many. Raises CorruptBatchError."""
    return decode_into_columns(fetch.data, columns, verify_crc=check_crcs,
                               from_offset=fetch.fetch_offset)


def _deserialized(record: ConsumerRecord, key_deserializer, value_deserializer):
    key, value = record.key, record.value
    if key_deserializer is not None and key is not None:
        key = key_deserializer(key)
    if value_deserializer is not None and value is not None:
        value = value_deserializer(value)
    return _new(type(record), (record.offset, record.timestamp, key, value, record.headers))
