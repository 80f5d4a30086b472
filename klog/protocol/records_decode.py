"""Decoding the records of a v2 batch: the consumer's hot path.

Owns the record layout on the way in (see :mod:`klog.protocol.records` for the layout and the
public API). :func:`decode_records` first runs a lean decoder that inlines one- and two-byte
varints and trusts the input only as far as an exception will catch it; on any surprise the
checked decoder runs from the start of the batch and either agrees or names the bad byte.
Both give the same records for the same bytes.

What can fail: :class:`~klog.protocol.record_batch.CorruptBatchError` for any malformed
record (a length past the end, a negative length other than -1, a header key that is not
UTF-8, bytes left over or missing).
"""

from __future__ import annotations

from typing import NamedTuple

from klog.protocol.record_batch import CorruptBatchError


class Record(NamedTuple):
    """One decoded record. ``timestamp`` is already the batch's max_timestamp for LogAppendTime."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


ZIGZAG = [(b >> 1) ^ -(b & 1) for b in range(128)]  # a one-byte varint -> its value


def read_varint(buf, pos: int, end: int, what: str) -> tuple[int, int]:
    """Decode one zig-zag varint at ``pos``; raises CorruptBatchError past ``end`` or 10 bytes."""
    unsigned = 0
    shift = 0
    while True:
        if pos >= end:
            raise CorruptBatchError(f"{what}: varint runs past the end at byte {pos}", position=pos)
        byte = buf[pos]
        pos += 1
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), pos
        shift += 7
        if shift >= 70:
            raise CorruptBatchError(f"{what}: varint longer than 10 bytes", position=pos)


def decode_records(data: bytes, start: int, end: int, count: int, base_offset: int, base_ts: int,
                   record_type: type = Record):
    """Decode ``count`` records from ``data[start:end]`` (bytes, whose slices are the values).

    ``record_type`` is Record or a subclass (tuple layout unchanged), built directly, so a
    caller that wants its own record class pays no per-record conversion.
    Raises CorruptBatchError (positions relative to ``data``) for malformed records.
    """
    try:
        return _decode_fast(data, start, end, count, base_offset, base_ts, _record=record_type)
    except (IndexError, ValueError, TypeError):
        return _decode_checked(data, start, end, count, base_offset, base_ts, record_type)


class _SlowPath(ValueError):
    """Raised inside the fast decoder when the input needs the checked decoder's verdict."""


def _decode_fast(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_ts: int,
    *,
    _record=Record,  # bound as locals: LOAD_FAST beats LOAD_GLOBAL on the hot loop
    _new=tuple.__new__,
    _zigzag=ZIGZAG,
):
    """Decode ``count`` records from ``buf[pos:end]`` assuming well-formed, small fields.

    Any surprise (a long varint, a negative length, a short buffer, a length mismatch) raises
    an exception the caller answers by running :func:`_decode_checked`, which gives the
    precise error; so this function may stay lean. Field lengths never move ``pos`` backwards,
    so a record that reads past ``end`` always leaves ``pos > end``.
    """
    records: list[Record] = []
    append = records.append
    zigzag = _zigzag
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            length = zigzag[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c >= 0x80:
                raise _SlowPath
            u = (b & 0x7F) | (c << 7)
            length = (u >> 1) ^ -(u & 1)
            pos += 2
        start = pos
        b = buf[pos + 1]  # buf[pos] is the unused attributes byte
        if b < 0x80:
            timestamp_delta = zigzag[b]
            pos += 2
        else:
            timestamp_delta, pos = read_varint(buf, pos + 1, end, "timestamp delta")
        b = buf[pos]
        if b < 0x80:
            offset_delta = zigzag[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c >= 0x80:
                raise _SlowPath
            u = (b & 0x7F) | (c << 7)
            offset_delta = (u >> 1) ^ -(u & 1)
            pos += 2
        b = buf[pos]
        if b < 0x80:
            n = zigzag[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c >= 0x80:
                raise _SlowPath
            u = (b & 0x7F) | (c << 7)
            n = (u >> 1) ^ -(u & 1)
            pos += 2
        if n < 0:
            if n != -1:
                raise _SlowPath
            key = None
        else:
            key = buf[pos : pos + n]
            pos += n
        b = buf[pos]
        if b < 0x80:
            n = zigzag[b]
            pos += 1
        else:
            c = buf[pos + 1]
            if c >= 0x80:
                raise _SlowPath
            u = (b & 0x7F) | (c << 7)
            n = (u >> 1) ^ -(u & 1)
            pos += 2
        if n < 0:
            if n != -1:
                raise _SlowPath
            value = None
        else:
            value = buf[pos : pos + n]
            pos += n
        if buf[pos]:
            headers, pos = read_headers(buf, pos, end)
        else:
            headers = []
            pos += 1
        if pos - start != length:
            raise _SlowPath
        append(
            _new(
                _record,
                (base_offset + offset_delta, base_ts + timestamp_delta, key, value, headers),
            )
        )
    if pos != end:
        raise _SlowPath
    return records


def read_headers(buf, pos: int, end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = read_varint(buf, pos, end, "header count")
    if count < 0:
        raise CorruptBatchError(f"header count {count} is negative", position=pos)
    headers = []
    for _ in range(count):
        n, pos = read_varint(buf, pos, end, "header key length")
        if n < 0 or pos + n > end:
            raise CorruptBatchError(f"header key length {n} at byte {pos} is invalid", position=pos)
        try:
            h_key = buf[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptBatchError(f"header key at byte {pos} is not UTF-8", position=pos) from exc
        pos += n
        h_value, pos = _read_nullable(buf, pos, end, "header value")
        headers.append((h_key, h_value))
    return headers, pos


def _read_nullable(buf, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos, end, what + " length")
    if n == -1:
        return None, pos
    if n < -1 or pos + n > end:
        raise CorruptBatchError(
            f"{what} length {n} at byte {pos} overruns the {end - pos} bytes left", position=pos
        )
    return bytes(buf[pos : pos + n]), pos + n


def _decode_checked(buf, pos: int, end: int, count: int, base_offset: int, base_ts: int,
                    record_type: type = Record):
    """The slow, fully checked decoder: same result as the fast one, or a precise error."""
    records = []
    for index in range(count):
        length, pos = read_varint(buf, pos, end, f"record {index} length")
        start = pos
        if length < 0 or start + length > end:
            raise CorruptBatchError(
                f"record {index} length {length} at byte {pos} overruns the {end - pos} bytes left",
                position=pos,
            )
        record_end = start + length
        pos += 1  # attributes
        timestamp_delta, pos = read_varint(buf, pos, record_end, "timestamp delta")
        offset_delta, pos = read_varint(buf, pos, record_end, "offset delta")
        key, pos = _read_nullable(buf, pos, record_end, "key")
        value, pos = _read_nullable(buf, pos, record_end, "value")
        headers, pos = read_headers(buf, pos, record_end)
        if pos != record_end:
            raise CorruptBatchError(
                f"record {index} declares {length} bytes but its fields take {pos - start}",
                position=start,
            )
        records.append(
            record_type(base_offset + offset_delta, base_ts + timestamp_delta, key, value, headers)
        )
    if pos != end:
        raise CorruptBatchError(
            f"{end - pos} bytes left after the batch's {count} records", position=pos
        )
    return records
