"""Checking a Produce request's records before anything is written.

Every batch is checked (magic, lengths, records_count against last_offset_delta, the size
limits, CRC-32C); the first bad one rejects the whole append, so a request is appended entirely
or not at all. Nothing is copied: the result is a list of spans into the caller's buffer.

The hot path unpacks each header once and computes one CRC; when anything is off, the batch is
handed to :func:`klog.protocol.record_batch.check_batch`, the one definition of the rules, for
the exact error. Producers always number records 0..n-1, so ``last_offset_delta`` must be
``records_count - 1`` and a batch holds at least one record (stricter than ``check_batch``,
which also serves compacted logs).
"""

from __future__ import annotations

from crc32c import crc32c

from klog.protocol import record_batch as rb

from .errors import CorruptRecordError, RecordTooLargeError

_unpack = rb.HEADER.unpack_from
_CRC_START = rb.CRC_START


def validate_append(
    view: memoryview, *, path: str, segment_bytes: int, max_message_bytes: int,
    produced: bool = True,
) -> tuple[list[tuple[int, int, int, int]], int, int]:
    """Return ``(spans, records, offsets)``: per batch ``(position, size, last_offset_delta,
    max_timestamp)``, the record count and the number of offsets the append takes.
    ``produced=False``: a follower's copy of its leader's batches, which a compacted leader
    may have emptied or thinned (``check_batch``'s rules: fewer records than offsets).
    Raises CorruptRecordError or RecordTooLargeError naming the batch and the numbers."""
    n = len(view)
    if n == 0:
        raise CorruptRecordError("the append holds no record batch", path=path)
    if n > segment_bytes:
        raise RecordTooLargeError(path=path, what="the append", size=n, limit=segment_bytes,
                                  setting="segment.bytes")
    pos, spans, records, offsets = 0, [], 0, 0
    while pos < n:
        if n - pos < rb.HEADER_BYTES:
            _fail(view, pos, path, len(spans))
        _, length, _, magic, crc, _, delta, _, max_ts, _, _, _, count = _unpack(view, pos)
        size = length + rb.LOG_OVERHEAD
        if magic != rb.MAGIC or length < rb.MIN_BATCH_LENGTH or size > n - pos:
            _fail(view, pos, path, len(spans))
        if size > max_message_bytes:
            raise RecordTooLargeError(path=path, what=f"batch {len(spans)}", size=size,
                                      limit=max_message_bytes, setting="max.message.bytes")
        if (count < 1 or delta != count - 1) and (produced or count < 0 or delta < count - 1):
            _fail(view, pos, path, len(spans))
        if crc32c(view[pos + _CRC_START : pos + size]) != crc:
            _fail(view, pos, path, len(spans))
        spans.append((pos, size, delta, max_ts))
        records += count
        offsets += delta + 1
        pos += size
    return spans, records, offsets


def _fail(view: memoryview, pos: int, path: str, batch_index: int) -> None:
    """Raise the precise error for the batch at ``pos``, which the fast path refused."""
    try:
        header = rb.check_batch(view, pos, len(view) - pos)
    except rb.CorruptBatchError as exc:
        raise CorruptRecordError(str(exc), path=path, position=pos,
                                 batch_index=batch_index) from exc
    raise CorruptRecordError(
        f"records_count {header.records_count} and last_offset_delta "
        f"{header.last_offset_delta} disagree (a produced batch numbers its records 0..n-1)",
        path=path, position=pos, batch_index=batch_index,
    )
