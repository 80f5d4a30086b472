"""Record keys in batches, for a compacted topic's produce check (Kafka's validateKey).

A compacted topic keeps the latest record per key, so a record without a key has no place in
it: Kafka refuses the produce with INVALID_RECORD. The check decodes each batch's records with
the records codec (compiled when built: one C call per batch) and looks at the keys only.
"""

from __future__ import annotations

from klog.protocol.records import records_section, whole_batches
from klog.protocol.records_codec import decode_records


def keyless_batch_index(buf) -> int | None:
    """The index of the first batch of ``buf`` (whole, checked batches back to back, as a
    Produce request's records) with a record whose key is null, or None. Control batches are
    not looked at. Raises CorruptBatchError."""
    for n, (pos, header) in enumerate(whole_batches(buf, verify_crc=False)):
        if header.is_control or header.records_count == 0:
            continue
        data, start, end = records_section(buf, pos, header)
        records = decode_records(data, start, end, header.records_count, header.base_offset,
                                 header.base_timestamp)
        if any(record[2] is None for record in records):
            return n
    return None
