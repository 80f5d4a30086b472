"""``__transaction_state``: where a transactional id lives, and its records in Kafka's format.

Placement is Kafka's: partition ``Utils.abs(String.hashCode(transactional.id)) %
transaction.state.log.num.partitions`` (``Utils.abs`` maps Integer.MIN_VALUE to 0 by
masking the sign bit, so it is ``hash & 0x7fffffff``).

Records are Kafka's coordinator records, so a Kafka tool reading the topic understands them:

- key: int16 version 0, then ``TransactionalId`` (int16-length string);
- value: int16 version (0 written; 0 and 1 read), then ``ProducerId`` int64,
  ``ProducerEpoch`` int16, ``TransactionTimeoutMs`` int32, ``TransactionStatus`` int8,
  ``TransactionPartitions`` (nullable array of (``Topic`` string, ``PartitionIds`` int32
  array)), ``TransactionLastUpdateTimestampMs`` int64, ``TransactionStartTimestampMs`` int64.
  Version 1 is the flexible encoding of the same fields (compact lengths, tagged fields:
  PreviousProducerId tag 0, NextProducerId tag 1, ClientTransactionVersion tag 2);
- a null value (tombstone): the id expired.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Iterator

from appliance.workers.transactions.state import TxnMetadata, TxnState
from klog.protocol.records import decode_batches

log = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"
LOAD_READ_BYTES = 1 << 20

_I16, _I32, _I64, _I8 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q"), \
    struct.Struct(">b")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``partitionFor``: the partition of __transaction_state holding the id."""
    return (java_string_hash(transactional_id) & 0x7FFFFFFF) % partitions


# -- encoding --------------------------------------------------------------------------------

def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def encode_value(meta: TxnMetadata) -> bytes:
    """Version 0 of TransactionLogValue."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(index)
    out = [_I16.pack(0), _I64.pack(meta.producer_id), _I16.pack(meta.producer_epoch),
           _I32.pack(meta.timeout_ms), _I8.pack(int(meta.state)), _I32.pack(len(by_topic))]
    for topic, indexes in by_topic.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(indexes)))
        out.extend(_I32.pack(i) for i in indexes)
    out.append(_I64.pack(meta.update_ms))
    out.append(_I64.pack(meta.start_ms))
    return b"".join(out)


def record(meta: TxnMetadata) -> tuple[bytes, bytes | None]:
    """The record that states ``meta`` (a tombstone for a Dead id)."""
    key = encode_key(meta.transactional_id)
    return key, None if meta.state is TxnState.DEAD else encode_value(meta)


# -- decoding --------------------------------------------------------------------------------

class RecordError(ValueError):
    """Bytes that are not a TransactionLog record this coordinator reads."""


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False):
        self.data, self.pos, self.flexible = memoryview(data), 0, flexible

    def fixed(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.data):
            raise RecordError("record too short")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise RecordError("bad varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def length(self) -> int:
        """An array or string length; -1 for null."""
        return self.varint() - 1 if self.flexible else self.fixed(_I32)

    def string(self) -> str:
        size = self.varint() - 1 if self.flexible else self.fixed(_I16)
        if size < 0 or self.pos + size > len(self.data):
            raise RecordError("bad string")
        text = bytes(self.data[self.pos:self.pos + size]).decode()
        self.pos += size
        return text

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.varint()):
                self.varint()
                size = self.varint()
                self.pos += size


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.fixed(_I16)
    if version != 0:
        raise RecordError(f"key version {version} is not a TransactionLogKey")
    return reader.string()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version = reader.fixed(_I16)
    if version not in (0, 1):
        raise RecordError(f"value version {version} is not a TransactionLogValue")
    reader.flexible = version == 1
    producer_id = reader.fixed(_I64)
    epoch = reader.fixed(_I16)
    timeout_ms = reader.fixed(_I32)
    try:
        state = TxnState(reader.fixed(_I8))
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    partitions = set()
    for _ in range(max(reader.length(), 0)):
        topic = reader.string()
        for _ in range(max(reader.length(), 0)):
            partitions.add((topic, reader.fixed(_I32)))
        reader.skip_tags()
    update_ms = reader.fixed(_I64)
    start_ms = reader.fixed(_I64)
    return TxnMetadata(transactional_id, producer_id, epoch, timeout_ms, state,
                       frozenset(partitions), start_ms, update_ms)


class LoadedTransactions:
    """What one partition's records add up to: the latest metadata of every id."""

    def __init__(self) -> None:
        self.ids: dict[str, TxnMetadata] = {}
        self.records = 0
        self.skipped = 0

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        self.records += 1
        try:
            transactional_id = decode_key(bytes(key or b""))
            if value is None:
                self.ids.pop(transactional_id, None)
            else:
                self.ids[transactional_id] = decode_value(transactional_id, bytes(value))
        except (RecordError, UnicodeDecodeError, struct.error) as exc:
            self.skipped += 1
            if self.skipped <= 10:
                log.warning("%s: skipping a record that is not a transaction's (%s)",
                            TRANSACTION_TOPIC, exc)


def replay(plog, state: LoadedTransactions, *,
           chunk_bytes: int = LOAD_READ_BYTES) -> Iterator[None]:
    """Apply a partition's records from its log start to its log end to ``state``, one read
    at a time, yielding after each (as the group coordinator's load)."""
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        piece = plog.read_replica(offset, chunk_bytes)
        if not piece:
            break
        for header, records in decode_batches(piece.read()):
            if not header.is_control:
                for r in records:
                    if r.offset >= offset:
                        state.apply(r.key, r.value)
            offset = header.base_offset + header.last_offset_delta + 1
        yield
