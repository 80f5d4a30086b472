"""Kafka RecordBatch v2 (magic 2): the header layout and the per-batch operations a broker needs.

This module is the one place in klog where the batch header is defined. The broker keeps batches
opaque: it checks a batch (magic, lengths, CRC-32C), patches ``baseOffset`` (outside the CRC), and
may stamp LogAppendTime (inside the CRC, so the CRC is recomputed once per batch). It never looks
at individual records; record encoding and decoding live in :mod:`klog.protocol.records`.

On-disk and on-wire layout (big-endian; offsets from the start of the batch)::

    0  int64  base_offset             overwritten by the broker
    8  int32  batch_length            bytes after this field; whole batch = batch_length + 12
    12 int32  partition_leader_epoch  -1 from producers
    16 int8   magic                   2
    17 uint32 crc                     CRC-32C of bytes 21 .. end of batch
    21 int16  attributes              bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23 int32  last_offset_delta
    27 int64  base_timestamp
    35 int64  max_timestamp
    43 int64  producer_id
    51 int16  producer_epoch
    53 int32  base_sequence
    57 int32  records_count
    61 ...    records (compressed as one blob when the codec is not 0)

Rules: functions take a buffer and a position, never copy the batch, and raise
:class:`CorruptBatchError` with the numbers that disagree.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER.size  # 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes batch_length does not count
MAGIC = 2

# Field positions used by in-place patches.
BASE_OFFSET = struct.Struct(">q")  # at 0
BATCH_LENGTH = struct.Struct(">i")  # at 8
LEADER_EPOCH = struct.Struct(">i")  # at 12
CRC = struct.Struct(">I")  # at 17
ATTRIBUTES = struct.Struct(">h")  # at 21
MAX_TIMESTAMP = struct.Struct(">q")  # at 35
CRC_START = 21
MAGIC_POS = 16
MAX_TIMESTAMP_POS = 35
ATTRIBUTES_POS = 21

# Attribute bits.
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 0 CreateTime, 1 LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# The smallest legal batch_length: the header after the first 12 bytes.
MIN_BATCH_LENGTH = HEADER_BYTES - LOG_OVERHEAD


class CorruptBatchError(ValueError):
    """A batch fails a structural or CRC check. The message names the numbers that disagree."""

    def __init__(self, message: str, *, position: int = 0):
        super().__init__(message)
        self.position = position


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the 61-byte header at ``pos`` without any check beyond its presence."""
    if len(buf) - pos < HEADER_BYTES:
        raise CorruptBatchError(
            f"batch header needs {HEADER_BYTES} bytes, {len(buf) - pos} remain", position=pos
        )
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def check_header(header: BatchHeader, available: int, pos: int = 0) -> None:
    """Structural checks that need no CRC: magic, length bounds, offset delta, record count."""
    if header.magic != MAGIC:
        raise CorruptBatchError(f"batch magic is {header.magic}, expected {MAGIC}", position=pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch_length {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}",
            position=pos,
        )
    if header.size > available:
        raise CorruptBatchError(
            f"batch of {header.size} bytes overruns the {available} bytes available", position=pos
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptBatchError(
            f"last_offset_delta {header.last_offset_delta} and records_count "
            f"{header.records_count} must not be negative",
            position=pos,
        )
    if header.records_count > 0 and header.last_offset_delta < header.records_count - 1:
        raise CorruptBatchError(
            f"last_offset_delta {header.last_offset_delta} cannot hold "
            f"{header.records_count} records",
            position=pos,
        )


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the part of the batch at ``pos`` that the crc field covers."""
    with memoryview(buf) as view:
        return crc32c(view[pos + CRC_START : pos + size])


def check_batch(buf, pos: int = 0, available: int | None = None) -> BatchHeader:
    """Read the header at ``pos`` and check the whole batch, CRC included.

    ``available`` bounds the bytes the batch may occupy (default: to the end of ``buf``).
    Raises :class:`CorruptBatchError` when any check fails.
    """
    if available is None:
        available = len(buf) - pos
    header = read_header(buf, pos)
    check_header(header, available, pos)
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptBatchError(
            f"batch at byte {pos} has crc {header.crc:#010x}, its bytes give {actual:#010x}",
            position=pos,
        )
    return header


def scan_batches(buf, start: int = 0, end: int | None = None, *, verify_crc: bool = True):
    """Yield ``(position, header)`` for consecutive whole, valid batches in ``buf[start:end]``.

    Stops silently at a partial batch at the end; raises :class:`CorruptBatchError` at the
    first batch that is complete but invalid. Callers that recover logs catch it and truncate.
    """
    if end is None:
        end = len(buf)
    pos = start
    while end - pos >= HEADER_BYTES:
        header = read_header(buf, pos)
        if header.magic == MAGIC and header.batch_length >= MIN_BATCH_LENGTH and (
            pos + header.size > end
        ):
            return  # a partial batch: the caller decides whether that is a torn tail
        if verify_crc:
            check_batch(buf, pos, end - pos)
        else:
            check_header(header, end - pos, pos)
        yield pos, header
        pos += header.size


def set_base_offset(buf, pos: int, base_offset: int) -> None:
    """Patch ``base_offset`` in place. It lies outside the CRC, so the CRC stays valid."""
    BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Patch ``partition_leader_epoch`` in place (outside the CRC)."""
    LEADER_EPOCH.pack_into(buf, pos + 12, epoch)


def stamp_log_append_time(buf, pos: int, size: int, append_time_ms: int) -> None:
    """Set the LogAppendTime bit and ``max_timestamp``, then recompute the CRC once.

    Kafka's rule for LogAppendTime batches: consumers read every record's timestamp as the
    batch's ``max_timestamp``, so the records themselves are left untouched.
    """
    (attributes,) = ATTRIBUTES.unpack_from(buf, pos + ATTRIBUTES_POS)
    ATTRIBUTES.pack_into(buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    MAX_TIMESTAMP.pack_into(buf, pos + MAX_TIMESTAMP_POS, append_time_ms)
    CRC.pack_into(buf, pos + 17, compute_crc(buf, pos, size))
