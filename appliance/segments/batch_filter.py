"""Rewriting one record batch for the log cleaner: Kafka's ``MemoryRecords.filterTo`` rules.

A batch keeps what it was: its base offset, last offset delta (so a producer's sequence
still ends where it did), base timestamp, attributes, producer id, epoch and base sequence,
and partition leader epoch. Because base offset and base timestamp stay, each retained
record keeps its bytes, deltas, headers and all (``key_passes``: copied as they lie by the
compiled pass, one C call per batch, when they are what encoding the record again gives;
decoded and encoded again by the pure path otherwise); only the record count, the max
timestamp (CreateTime: the retained records' largest) and the CRC are new, and a compressed
batch is compressed again with its codec. A batch that keeps every record is copied whole.

Which records stay (Kafka's ``shouldRetainRecord``): a record past what the offset map covers;
a record whose key maps to its own offset or an earlier one (the key's latest); not a
tombstone older than the delete horizon; never a record without a key (Kafka drops those).
Which batches stay: an aborted transaction's data batch goes whole; a control batch stays
unless its transaction left no data and it is older than the delete horizon; a batch left
empty goes, except the last batch of a producer still known to the partition, which stays
as an empty header (Kafka's RETAIN_EMPTY) so the producer's sequence and epoch survive.

What can fail: CorruptBatchError (a record section that does not parse or decompress).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from klog.protocol import record_batch as rb
from klog.protocol.compression import compress

from .key_passes import batch_records, kept_records
from .offset_map import OffsetMap
from .txn_cleaning import CleanedTransactions

_MARKER_TYPE = struct.Struct(">h")  # at byte 2 of a control record's key


class Retention(NamedTuple):
    """What the run decides once for every batch (the map, the horizon, the producers)."""

    offset_map: OffsetMap
    delete_horizon_ms: int  # tombstones and empty markers older than this go
    transactions: CleanedTransactions
    last_batch_of_producer: dict[int, int]  # producer id -> last offset of its last batch


def filter_batch(buf, pos: int, header: rb.BatchHeader, rules: Retention) -> bytes | None:
    """The batch at ``pos`` as the cleaner keeps it: the same bytes, fewer records, an empty
    header, or None (dropped)."""
    keep_header = rules.last_batch_of_producer.get(header.producer_id) == header.last_offset
    if header.is_control:
        empty = rules.transactions.on_marker(header.last_offset, header.producer_id,
                                             is_commit(buf, pos, header))
        if empty and header.max_timestamp < rules.delete_horizon_ms and not keep_header:
            return None
        return bytes(buf[pos : pos + header.size])
    if rules.transactions.on_batch(header.last_offset, header.producer_id,
                                   header.is_transactional):
        return _empty(header) if keep_header else None
    kept, body, max_ts = kept_records(buf, pos, header, rules.offset_map,
                                      rules.delete_horizon_ms)
    if kept == header.records_count:
        return bytes(buf[pos : pos + header.size])
    if not kept:
        return _empty(header) if keep_header else None
    if header.codec:
        body = compress(header.codec, body)
    max_timestamp = header.max_timestamp if header.log_append_time else max_ts
    return _assemble(header, header.attributes, max_timestamp, kept, body)


def is_commit(buf, pos: int, header: rb.BatchHeader) -> bool:
    """Whether the control batch at ``pos`` is a COMMIT marker (else ABORT or unknown)."""
    records = batch_records(buf, pos, header)
    key = records[0][2] if records else None
    return key is not None and len(key) >= 4 and _MARKER_TYPE.unpack_from(key, 2)[0] == 1


def _empty(header: rb.BatchHeader) -> bytes:
    """A header without records (uncompressed, as Kafka writes it) keeping the producer's
    offsets, epoch and sequence."""
    return _assemble(header, header.attributes & ~rb.CODEC_MASK, header.max_timestamp, 0, b"")


def _assemble(header: rb.BatchHeader, attributes: int, max_timestamp: int, count: int,
              body: bytes) -> bytes:
    out = bytearray(rb.HEADER_BYTES + len(body))
    rb.HEADER.pack_into(out, 0, header.base_offset, len(out) - rb.LOG_OVERHEAD,
                        header.partition_leader_epoch, rb.MAGIC, 0, attributes,
                        header.last_offset_delta, header.base_timestamp, max_timestamp,
                        header.producer_id, header.producer_epoch, header.base_sequence, count)
    out[rb.HEADER_BYTES:] = body
    rb.CRC.pack_into(out, 17, rb.compute_crc(out, 0, len(out)))
    return bytes(out)
