"""Valid RecordBatch v2 bytes for storage tests: the header via record_batch.HEADER, a CRC-32C,
and an opaque payload (the engine never looks inside the records)."""

from __future__ import annotations

import random

from crc32c import crc32c

from klog.protocol.record_batch import CRC, CRC_START, HEADER, HEADER_BYTES, LOG_OVERHEAD, MAGIC


def make_batch(
    *,
    records: int = 1,
    payload: bytes = b"",
    base_timestamp: int = 1_700_000_000_000,
    max_timestamp: int | None = None,
    base_offset: int = 0,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One batch of ``records`` records (last_offset_delta = records - 1), CRC included."""
    if max_timestamp is None:
        max_timestamp = base_timestamp
    body_length = HEADER_BYTES + len(payload)
    header = HEADER.pack(
        base_offset, body_length - LOG_OVERHEAD, -1, MAGIC, 0, attributes, records - 1,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records,
    )
    batch = bytearray(header + payload)
    CRC.pack_into(batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def random_batch(rng: random.Random, *, max_payload: int = 300,
                 timestamp: int | None = None) -> bytes:
    """A batch with a seeded random payload, record count and timestamps."""
    records = rng.randint(1, 5)
    base = timestamp if timestamp is not None else rng.randint(1_000, 1_000_000)
    return make_batch(
        records=records,
        payload=rng.randbytes(rng.randint(0, max_payload)),
        base_timestamp=base,
        max_timestamp=base + rng.randint(0, 50),
    )


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """What the log stores: the same bytes with base_offset patched (outside the CRC)."""
    return base_offset.to_bytes(8, "big", signed=True) + batch[8:]


def split_batches(data: bytes) -> list[bytes]:
    """Cut back-to-back batches apart by their lengths."""
    out, pos = [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + LOG_OVERHEAD
        out.append(data[pos : pos + size])
        pos += size
    return out
