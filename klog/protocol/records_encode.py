"""Encoding the records of a v2 batch: the producer's hot path, one ``bytes.join`` a record.

Owns the record layout on the way out (see :mod:`klog.protocol.records` for the layout and the
public API). Speed comes from precomputed varint bytes for the common small values and from
one fast loop whose every unusual input (a long varint, a None timestamp, a wrong type)
raises inside a ``try`` and is re-encoded by the checked, general :func:`encode_record`;
a ``try`` costs nothing in CPython 3.11 until it catches.

Rules: pure functions of their arguments; no clock (``now_ms`` comes from the caller).
"""

from __future__ import annotations

from crc32c import crc32c

from klog.protocol.compression import compress
from klog.protocol.record_batch import (
    CODEC_MASK,
    CONTROL_BIT,
    CRC,
    CRC_START,
    HEADER,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
)

CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_TIMESTAMP = -1


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit integer (1 to 10 bytes)."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} does not fit a varlong")
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


# Precomputed varints of 0 .. 16383 (lengths, offset deltas; a list) and of timestamp deltas
# in -2048 .. 16383 ms (a dict, as negative list indexes would wrap). The fast path looks up
# ``DELTAS[(ts - base) | 0]``: ``| 0`` turns a float timestamp into a TypeError, which a dict
# lookup alone would accept. Anything outside the tables raises and takes the slow path.
_TABLE_SIZE = 1 << 14
VARINTS = (
    [bytes((n << 1,)) for n in range(64)]
    + [bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) for n in range(64, 8192)]
    + [
        bytes((((n << 1) & 0x7F) | 0x80, ((n >> 6) & 0x7F) | 0x80, n >> 13))
        for n in range(8192, _TABLE_SIZE)
    ]
)
DELTAS = dict(enumerate(VARINTS))
DELTAS.update({n: encode_varint(n) for n in range(-2048, 0)})
NO_HEADERS = b"\x00"
NULL = b"\x01"  # varint -1
ATTRIBUTES = b"\x00"


def encode_headers(headers) -> bytes:
    parts = [encode_varint(len(headers))]
    for pair in headers:
        try:
            h_key, h_value = pair
        except (TypeError, ValueError):
            raise TypeError(f"a header must be a (str, bytes | None) pair, not {pair!r}") from None
        if isinstance(h_key, str):
            h_key = h_key.encode("utf-8")
        elif not isinstance(h_key, (bytes, bytearray, memoryview)):
            raise TypeError(f"a header key must be str, not {type(h_key).__name__}")
        parts.append(encode_varint(len(h_key)))
        parts.append(bytes(h_key))
        parts.append(_encode_nullable(h_value, "header value"))
    return b"".join(parts)


def _encode_nullable(data, what: str) -> bytes:
    if data is None:
        return NULL
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"a record {what} must be bytes-like or None, not {type(data).__name__}")
    data = bytes(data)
    return encode_varint(len(data)) + data


def encode_record(offset_delta: int, timestamp_delta: int, key, value, headers) -> bytes:
    """The checked, general encoder of one record, length prefix included."""
    body = b"".join(
        (
            ATTRIBUTES,
            encode_varint(timestamp_delta),
            encode_varint(offset_delta),
            _encode_nullable(key, "key"),
            _encode_nullable(value, "value"),
            encode_headers(headers) if headers else NO_HEADERS,
        )
    )
    return encode_varint(len(body)) + body


def to_timestamp(timestamp, now_ms: int | None) -> int:
    if timestamp is None:
        if now_ms is None:
            raise ValueError("a record has no timestamp and no now_ms was given")
        return now_ms
    if type(timestamp) is not int:
        raise TypeError(f"a timestamp must be an int (ms), not {type(timestamp).__name__}")
    return timestamp


def encode_one(offset_delta: int, timestamp, base_ts: int, key, value, headers,
               now_ms: int | None) -> tuple[bytes, bytes, int]:
    """One record: its length prefix, its body and its timestamp. The one place the record
    layout is written (the builder and `encode_all` both call it).

    The fast path covers what producers send (bytes, an int timestamp within the precomputed
    delta range); anything else takes `encode_record`, which checks every field and raises a
    clear error (its body carries the prefix, so the prefix returned is empty)."""
    try:
        delta = DELTAS[(timestamp - base_ts) | 0]
        if key is None:
            body = b"".join((ATTRIBUTES, delta, VARINTS[offset_delta], NULL, VARINTS[len(value)],
                             value, encode_headers(headers) if headers else NO_HEADERS))
        else:
            body = b"".join((ATTRIBUTES, delta, VARINTS[offset_delta], VARINTS[len(key)], key,
                             VARINTS[len(value)], value,
                             encode_headers(headers) if headers else NO_HEADERS))
        return VARINTS[len(body)], body, timestamp
    except (KeyError, IndexError, TypeError):
        timestamp = to_timestamp(timestamp, now_ms)
        return b"", encode_record(offset_delta, timestamp - base_ts, key, value, headers), \
            timestamp


def encode_all(records: list, base_ts: int, now_ms: int | None) -> tuple[list[bytes], int]:
    """Encode ``records`` (offset deltas 0, 1, ...); return the parts and the max timestamp."""
    parts: list[bytes] = []
    append = parts.append
    max_ts = base_ts
    for offset_delta, (ts, key, value, headers) in enumerate(records):
        prefix, body, ts = encode_one(offset_delta, ts, base_ts, key, value, headers, now_ms)
        if prefix:
            append(prefix)
        append(body)
        if ts > max_ts:
            max_ts = ts
    return parts, max_ts


def batch_attributes(
    codec: int, timestamp_type: int, is_transactional: bool, is_control: bool
) -> int:
    if codec & ~CODEC_MASK or codec > 4:
        raise ValueError(f"compression codec must be 0-4, not {codec}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
    attributes = codec
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    return attributes


def assemble_pieces(
    parts: list[bytes],
    count: int,
    *,
    attributes: int,
    base_offset: int,
    partition_leader_epoch: int,
    base_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> tuple[bytes, bytes]:
    """The batch as its header (CRC included) and its body: the records joined, compressed
    if asked. Apart, because a Produce request passes each piece to the socket as it is,
    and joining them would copy a megabyte body once more into memory just allocated."""
    body = b"".join(parts)
    codec = attributes & CODEC_MASK
    if codec:
        body = compress(codec, body)
    header = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_BYTES - LOG_OVERHEAD + len(body),  # batch_length
            partition_leader_epoch,
            MAGIC,
            0,  # crc, patched below
            attributes,
            max(count - 1, 0),  # last_offset_delta
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    with memoryview(header) as view:
        crc = crc32c(body, crc32c(view[CRC_START:]))
    CRC.pack_into(header, CRC_START - 4, crc)
    return bytes(header), body


def assemble(parts: list[bytes], count: int, **header: int) -> bytes:
    """Join the records, compress them if asked, and put the header (CRC included) in front
    (the header's fields as ``assemble_pieces`` names them)."""
    return b"".join(assemble_pieces(parts, count, **header))
