"""Records inside a v2 record batch: encoding whole batches and decoding them back.

The batch header is :mod:`klog.protocol.record_batch`'s; this module owns the records section
that follows it. The broker never calls it on the produce or fetch path (batches stay opaque
there); the client does, on every record, so both directions are written for CPython's speed:
precomputed varint bytes, one ``bytes.join`` per record, no per-record objects but the
result tuples, and a checked slow path taken only when the fast one meets something unusual.
When the compiled codec is built, :mod:`klog.protocol.records_codec` puts it in front of
both directions (one call per batch) and keeps the pure one as fallback and reference.
Readers that want arrays rather than records use :mod:`klog.protocol.records_columns`.

Record layout (varints are zig-zag, protobuf style)::

    length varint            bytes of the record after this field
    attributes int8          unused, 0
    timestamp_delta varlong  from the batch's base_timestamp
    offset_delta varint      from the batch's base_offset
    key_length varint        -1: null key
    key bytes
    value_length varint      -1: null value
    value bytes
    header_count varint
    per header: key_length varint, key (UTF-8), value_length varint (-1: null), value

Input shape for encoding: one ``(timestamp_ms, key, value, headers)`` tuple per record (the
order of ``BatchBuilder.append`` and of Kafka's own ``append(offset, timestamp, key, value,
headers)``), where key and value are bytes, bytearray, a byte-format memoryview, or None, and
headers is None, empty, or a sequence of ``(str, bytes | None)`` pairs. Decoding yields
:class:`Record` tuples.

What can fail: encoding raises ``TypeError`` for a field of the wrong type and ``ValueError``
for a timestamp the codec cannot fill in; decoding raises
:class:`~klog.protocol.record_batch.CorruptBatchError` (a ``ValueError``) for any bad byte,
chained to the codec error when decompression failed. Nothing here has a clock: a record
without a timestamp takes the caller's ``now_ms``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from klog.protocol.compression import CompressionError, decompress
from klog.protocol.record_batch import (
    CODEC_MASK,
    CONTROL_BIT,
    HEADER_BYTES,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptBatchError,
    check_header,
    compute_crc,
    read_header,
)
from klog.protocol.records_codec import decode_records, encode_all, encode_one
from klog.protocol.records_decode import Record
from klog.protocol.records_encode import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    assemble,
    batch_attributes,
    encode_varint,
    to_timestamp,
)

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "NO_TIMESTAMP",
    "BatchBuilder",
    "Record",
    "build_batch",
    "control_record",
    "control_type",
    "decode_batch",
    "decode_batches",
    "encode_varint",
    "first_offset_at_or_after",
    "in_batch",
    "records_section",
    "whole_batches",
]

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")  # version int16 = 0, type int16
_CONTROL_VALUE = struct.Struct(">hi")  # version int16 = 0, coordinator_epoch int32
_BATCH_LENGTH = struct.Struct(">i")  # at byte 8 of a batch


def build_batch(
    records: Iterable[tuple],
    *,
    base_offset: int = 0,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    now_ms: int | None = None,
) -> bytes:
    """Encode ``(timestamp_ms, key, value, headers)`` tuples as one v2 batch, CRC included.

    Offsets are ``base_offset``, ``base_offset + 1``, ...; the first record's timestamp is the
    base timestamp. A ``None`` timestamp becomes ``now_ms`` (ValueError if that is None too).
    For ``timestamp_type=LOG_APPEND_TIME`` the batch's max_timestamp is ``now_ms`` when given.
    An empty ``records`` gives an empty batch (count 0, timestamps -1 unless ``now_ms``).
    """
    if not isinstance(records, (list, tuple)):
        records = list(records)
    attributes = batch_attributes(codec, timestamp_type, is_transactional, is_control)
    if records:
        base_ts = to_timestamp(records[0][0], now_ms)
        parts, max_ts = encode_all(records, base_ts, now_ms)
    else:
        base_ts = max_ts = NO_TIMESTAMP if now_ms is None else now_ms
        parts = []
    if timestamp_type == LOG_APPEND_TIME and now_ms is not None:
        max_ts = now_ms
    return assemble(
        parts,
        len(records),
        attributes=attributes,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_ts=base_ts,
        max_ts=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


class BatchBuilder:
    """Accumulates records of one partition into one batch, up to ``batch_size`` bytes.

    ``append`` encodes the record at once, so ``size_estimate`` is the exact size of the batch
    built so far *before* compression (the bound the producer compares with ``batch_size``; a
    compressed batch comes out smaller). The first record always fits, however large, as in
    Kafka's producer; a later one that would overflow ``batch_size`` is refused. The producer
    state (id, epoch, base sequence) may be set at any time before ``build``, as Kafka assigns
    sequences when a batch is drained. ``build`` is idempotent (a retry resends the same
    bytes); ``append`` after it raises RuntimeError. Not safe for concurrent use.
    """

    __slots__ = (
        "_parts",
        "_size",
        "_count",
        "_base_ts",
        "_max_ts",
        "_batch_size",
        "_options",
        "_built",
    )

    def __init__(
        self,
        *,
        batch_size: int = 16384,
        codec: int = 0,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        partition_leader_epoch: int = -1,
    ):
        self._parts: list[bytes] = []
        self._size = HEADER_BYTES
        self._count = 0
        self._base_ts = NO_TIMESTAMP
        self._max_ts = NO_TIMESTAMP
        self._batch_size = batch_size
        self._built: bytes | None = None
        self._options = {
            "attributes": batch_attributes(codec, CREATE_TIME, is_transactional, False),
            "base_offset": base_offset,
            "partition_leader_epoch": partition_leader_epoch,
        }
        self.set_producer_state(producer_id, producer_epoch, base_sequence, is_transactional)

    def set_producer_state(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        is_transactional: bool = False,
    ) -> None:
        """Stamp the idempotent/transactional producer's identity; before ``build`` only."""
        if self._built is not None:
            raise RuntimeError("set_producer_state after build")
        attributes = self._options["attributes"] & ~TRANSACTIONAL_BIT
        self._options.update(
            attributes=attributes | (TRANSACTIONAL_BIT if is_transactional else 0),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )

    def append(self, timestamp: int, key, value, headers=None) -> bool:
        """Add one record; return False (and add nothing) when it would overflow the batch."""
        if self._built is not None:
            raise RuntimeError("append after build")
        count = self._count
        base_ts = self._base_ts if count else to_timestamp(timestamp, None)
        prefix, body, _ = encode_one(count, timestamp, base_ts, key, value, headers, None)
        size = self._size + len(prefix) + len(body)
        if count and size > self._batch_size:
            return False
        if prefix:
            self._parts.append(prefix)
        self._parts.append(body)
        self._size = size
        self._count = count + 1
        if not count:
            self._base_ts = self._max_ts = timestamp
        elif timestamp > self._max_ts:
            self._max_ts = timestamp
        return True

    @property
    def size_estimate(self) -> int:
        """Bytes of the batch so far, header included, before compression."""
        return self._size

    @property
    def records_count(self) -> int:
        return self._count

    def __len__(self) -> int:
        return self._count

    def build(self) -> bytes:
        """The finished batch (compressed when a codec was given). Idempotent."""
        if self._built is None:
            self._built = assemble(
                self._parts,
                self._count,
                base_ts=self._base_ts,
                max_ts=self._max_ts,
                **self._options,
            )
            self._parts = []
        return self._built


def control_record(control_type: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """Key and value of a transaction marker (``CONTROL_ABORT`` or ``CONTROL_COMMIT``)."""
    return _CONTROL_KEY.pack(0, control_type), _CONTROL_VALUE.pack(0, coordinator_epoch)


def control_type(record: Record) -> int:
    """The type of a control batch's record: ``CONTROL_ABORT`` (0) or ``CONTROL_COMMIT`` (1)."""
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptBatchError(f"control record at offset {record.offset} has key {key!r}")
    return _CONTROL_KEY.unpack_from(key)[1]


# --- decoding ---------------------------------------------------------------------------------


def _records_of(
    buf, pos: int, header: BatchHeader, max_decompressed_bytes: int | None,
    record_type: type = Record,
) -> list[Record]:
    """Decode the records of the (already checked) batch at ``pos``."""
    data, start, end = records_section(buf, pos, header, max_decompressed_bytes)
    try:
        records = decode_records(data, start, end, header.records_count, header.base_offset,
                                 header.base_timestamp, record_type)
    except CorruptBatchError as exc:
        raise in_batch(exc, pos, header) from exc
    if header.attributes & TIMESTAMP_TYPE_BIT:
        new = tuple.__new__
        max_ts = header.max_timestamp
        records = [new(record_type, (r[0], max_ts, r[2], r[3], r[4])) for r in records]
    return records


def in_batch(exc: CorruptBatchError, pos: int, header: BatchHeader) -> CorruptBatchError:
    """``exc`` (about a records section) said of the batch at ``pos``."""
    return CorruptBatchError(f"batch at byte {pos} (offset {header.base_offset}): {exc}",
                             position=pos)


def records_section(
    buf, pos: int, header: BatchHeader, max_decompressed_bytes: int | None = None
) -> tuple[bytes, int, int]:
    """``(data, start, end)``: the records section of the checked batch at ``pos`` (one from
    :func:`whole_batches`), decompressed, is ``data[start:end]``, and ``data`` is bytes.
    Raises CorruptBatchError when it does not decompress."""
    start = pos + HEADER_BYTES
    end = pos + header.size
    codec = header.attributes & CODEC_MASK
    if codec:
        try:
            with memoryview(buf) as view:
                data = decompress(codec, view[start:end], max_output_bytes=max_decompressed_bytes)
        except CompressionError as exc:
            raise CorruptBatchError(
                f"batch at byte {pos} (offset {header.base_offset}): records do not "
                f"decompress: {exc}",
                position=pos,
            ) from exc
        start, end = 0, len(data)
    elif type(buf) is bytes:
        data = buf
    else:
        with memoryview(buf) as view:
            data = bytes(view[start:end])
        start, end = 0, end - start
    return data, start, end


def _checked_header(buf, pos: int, available: int, verify_crc: bool) -> BatchHeader:
    header = read_header(buf, pos)
    check_header(header, available, pos)
    if verify_crc:
        actual = compute_crc(buf, pos, header.size)
        if actual != header.crc:
            raise CorruptBatchError(
                f"batch at byte {pos} (offset {header.base_offset}) has crc {header.crc:#010x}, "
                f"its bytes give {actual:#010x}",
                position=pos,
            )
    return header


def decode_batch(
    buf, pos: int = 0, *, verify_crc: bool = True, max_decompressed_bytes: int | None = None
) -> tuple[BatchHeader, list[Record]]:
    """Decode the one complete batch at ``pos``; raises CorruptBatchError if it is not whole."""
    header = _checked_header(buf, pos, len(buf) - pos, verify_crc)
    return header, _records_of(buf, pos, header, max_decompressed_bytes)


def decode_batches(
    buf,
    *,
    verify_crc: bool = True,
    skip_control: bool = False,
    max_decompressed_bytes: int | None = None,
    record_type: type = Record,
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Yield ``(header, records)`` for the consecutive batches of ``buf`` (e.g. Fetch records).

    A partial batch at the end (brokers cut Fetch responses at a byte limit) ends the iteration
    silently. A control batch (``header.is_control``) is yielded unless ``skip_control``.
    ``buf`` is any bytes-like object; bytes avoids one copy per uncompressed batch.
    ``record_type`` (Record or a subclass with the same fields) is what the records are built
    as, so a client's own record class costs no conversion.
    Raises CorruptBatchError at the first whole batch that fails a check.
    """
    for pos, header in whole_batches(buf, verify_crc=verify_crc, skip_control=skip_control):
        yield header, _records_of(buf, pos, header, max_decompressed_bytes, record_type)


def whole_batches(
    buf, *, verify_crc: bool = True, skip_control: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of the consecutive whole, checked batches of ``buf``;
    a partial batch at the end ends the iteration (see :func:`decode_batches`)."""
    end = len(buf)
    pos = 0
    unpack_length = _BATCH_LENGTH.unpack_from
    while end - pos >= LOG_OVERHEAD:
        (batch_length,) = unpack_length(buf, pos + 8)
        if pos + LOG_OVERHEAD + batch_length > end:
            return
        header = _checked_header(buf, pos, end - pos, verify_crc)
        if not (skip_control and header.attributes & CONTROL_BIT):
            yield pos, header
        pos += header.size


def first_offset_at_or_after(
    buf, pos: int, timestamp_ms: int, *, verify_crc: bool = True
) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of the batch at ``pos`` whose timestamp is
    at least ``timestamp_ms``, or None (ListOffsets by timestamp within one batch).

    The batch's max_timestamp answers None without decompressing when no record can match.
    """
    header = _checked_header(buf, pos, len(buf) - pos, verify_crc)
    if header.max_timestamp < timestamp_ms or header.records_count == 0:
        return None
    for record in _records_of(buf, pos, header, None):
        if record.timestamp >= timestamp_ms:
            return record.offset, record.timestamp
    return None
