"""Where each record of a records section lies, without decoding it: for the log cleaner.

The cleaner (and a compacted topic's key check on produce) needs of each record only its
bytes' extent, its offset and timestamp deltas, where its key is and whether its value is
null. A cleaned batch keeps its base offset and base timestamp, so a retained record's bytes
are copied as they are (its deltas still hold): :func:`record_spans` reads the varints that
say so and skips the rest, with no Record object and no copy of keys or values.

Record layout: see :mod:`klog.protocol.records`. What can fail: CorruptBatchError for a
varint or a length that runs past the section, or a count that does not match.
"""

from __future__ import annotations

from typing import NamedTuple

from klog.protocol.record_batch import CorruptBatchError


class RecordSpan(NamedTuple):
    start: int  # the record's first byte (its length varint) in the section's buffer
    end: int  # one past its last byte
    offset_delta: int
    timestamp_delta: int
    key_start: int  # -1 when the key is null
    key_end: int
    value_null: bool  # a tombstone, when the key is not null


def _varint(data, pos: int, end: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (value, next position)."""
    shift = result = 0
    while True:
        if pos >= end or shift > 63:
            raise CorruptBatchError(f"record varint runs past byte {end}", position=pos)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def record_spans(data, start: int, end: int, count: int) -> list[RecordSpan]:
    """The ``count`` records of ``data[start:end]`` (a decompressed records section).
    Raises CorruptBatchError when they do not fill the section exactly."""
    spans = []
    pos = start
    for _ in range(count):
        length, body = _varint(data, pos, end)
        record_end = body + length
        if length < 0 or record_end > end:
            raise CorruptBatchError(f"record of {length} bytes at {pos} overruns {end}",
                                    position=pos)
        p = body + 1  # attributes
        timestamp_delta, p = _varint(data, p, record_end)
        offset_delta, p = _varint(data, p, record_end)
        key_length, p = _varint(data, p, record_end)
        if key_length < 0:
            key_start = key_end = -1
        else:
            key_start, key_end = p, p + key_length
            p = key_end
        value_length, p = _varint(data, p, record_end)
        if p > record_end or (value_length > 0 and p + value_length > record_end):
            raise CorruptBatchError(f"record at {pos} overruns its {length} bytes", position=pos)
        spans.append(RecordSpan(pos, record_end, offset_delta, timestamp_delta, key_start,
                                key_end, value_length < 0))
        pos = record_end
    if pos != end:
        raise CorruptBatchError(f"{count} records end at byte {pos}, the section at {end}",
                                position=pos)
    return spans


def keyless_batch_index(buf) -> int | None:
    """The index of the first batch of ``buf`` (whole, checked batches back to back, as a
    Produce request's records) with a record whose key is null, or None: a compacted topic
    refuses those (Kafka's INVALID_RECORD). Control batches are not looked at.
    Raises CorruptBatchError."""
    from klog.protocol.records import records_section, whole_batches  # records imports us not

    for n, (pos, header) in enumerate(whole_batches(buf, verify_crc=False)):
        if header.is_control or header.records_count == 0:
            continue
        data, start, end = records_section(buf, pos, header)
        if any(span.key_start < 0 for span in record_spans(data, start, end,
                                                             header.records_count)):
            return n
    return None
