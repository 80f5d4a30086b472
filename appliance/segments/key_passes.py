"""The cleaner's two passes over one batch's records, by key: compiled when the offset map
is an offset table of digests (``OffsetMap.table``), else the pure-Python reference (a dict
keyed by the key bytes).

- :func:`map_batch` (the map pass): every keyed record at or past the first dirty offset
  sets its key's latest offset. Compiled: one C call per batch walks the records, hashes
  each key where it lies and sets its slot in the table (``_recordsc_keys.c``), with no
  Python object per record.
- :func:`kept_records` (the rewrite pass): which records of a batch stay, as their count,
  their bytes back to back and their largest timestamp. Compiled: one C call per batch
  decides per record (``batch_filter``'s rules, the same ones; the key's digest looked up
  in the table) and copies the kept records' bytes; since the batch keeps its base offset
  and base timestamp, a record's bytes are what encoding it again would give, and the C
  answers only for records the encoder would write byte for byte the same (shortest
  varints, attributes 0).

A batch the C declines (malformed, or bytes written some other way) takes the pure path for
that batch, which gives the same result or raises the decoder's CorruptBatchError.
"""

from __future__ import annotations

from klog.protocol import record_batch as rb
from klog.protocol.records import records_section
from klog.protocol.records_codec import (
    compiled_kept_records,
    compiled_map_keys,
    decode_records,
    encode_one,
)

from .offset_map import OffsetMap


def batch_records(buf, pos: int, header: rb.BatchHeader) -> list:
    """The records of the batch at ``pos``, timestamps as encoded (base + delta, also under
    LogAppendTime). Raises CorruptBatchError."""
    data, start, end = records_section(buf, pos, header)
    return decode_records(data, start, end, header.records_count, header.base_offset,
                          header.base_timestamp)


def map_batch(buf, pos: int, header: rb.BatchHeader, offset_map: OffsetMap,
              first_dirty: int) -> None:
    """Put every keyed record of the batch at ``pos`` from ``first_dirty`` on into the map.
    Raises CorruptBatchError."""
    if offset_map.table is not None:
        offset_map.reserve(header.records_count)
        data, start, end = records_section(buf, pos, header)
        fresh = compiled_map_keys(data, start, end, header.records_count, header.base_offset,
                                  header.base_timestamp, first_dirty, offset_map.table,
                                  offset_map.sip_key)
        if fresh is not None:
            offset_map.entries += fresh
            return
        for record in decode_records(data, start, end, header.records_count,
                                     header.base_offset, header.base_timestamp):
            if record[2] is not None and record[0] >= first_dirty:
                offset_map.put(record[2], record[0])
        return
    offsets = offset_map.offsets
    for record in batch_records(buf, pos, header):
        key = record[2]
        if key is not None and record[0] >= first_dirty:
            offsets[key] = record[0]


def kept_records(buf, pos: int, header: rb.BatchHeader, offset_map: OffsetMap,
                 delete_horizon_ms: int) -> tuple[int, bytes | None, int]:
    """``(kept, body, max_timestamp)`` of the batch at ``pos``: how many records stay, their
    records section uncompressed (None when all or none stay) and their largest timestamp
    as encoded (meaningless when none stay). Raises CorruptBatchError."""
    data, start, end = records_section(buf, pos, header)
    if offset_map.table is not None:
        out = compiled_kept_records(
            data, start, end, header.records_count, header.base_offset, header.base_timestamp,
            offset_map.latest_offset, offset_map.table, offset_map.sip_key,
            delete_horizon_ms, header.log_append_time, header.max_timestamp)
        if out is not None:
            return out
    records = decode_records(data, start, end, header.records_count, header.base_offset,
                             header.base_timestamp)
    kept = [r for r in records if _retained(r, header, offset_map, delete_horizon_ms)]
    if len(kept) == len(records) or not kept:
        return len(kept), None, max((r[1] for r in kept), default=0)
    base, base_ts = header.base_offset, header.base_timestamp
    parts = []
    for offset, timestamp, key, value, headers in kept:
        prefix, body, _ = encode_one(offset - base, timestamp, base_ts, key, value, headers,
                                     None)
        parts += (prefix, body)
    return len(kept), b"".join(parts), max(r[1] for r in kept)


def _retained(record, header: rb.BatchHeader, offset_map: OffsetMap, horizon: int) -> bool:
    """Kafka's shouldRetainRecord (see batch_filter's docstring)."""
    key = record[2]
    if key is None:
        return False
    offset = record[0]
    if offset > offset_map.latest_offset:
        return True
    offsets = offset_map.offsets
    if (offsets.get(key, -1) if offsets is not None else offset_map.get(key)) > offset:
        return False
    if record[3] is None:
        timestamp = header.max_timestamp if header.log_append_time else record[1]
        return timestamp >= horizon
    return True
