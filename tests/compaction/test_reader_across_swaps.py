"""A non-owner reader (another worker serving Fetch from the files) while the owner's cleaner
swaps segments under it: descriptors it holds keep reading the old, valid records; a segment
merged away is looked up again; a consumer reading from the start sees each key's latest
record at its own offset and never an offset out of range."""

from __future__ import annotations

import os

import pytest

from appliance.segments import PartitionLog
from appliance.segments.cleaner import clean
from appliance.segments.non_owner_reader import PartitionReader
from klog.protocol.records import decode_batches

from .logs import SMALL, all_records, write_updates

NOW = 10_000


def _consume(reader: PartitionReader, plog: PartitionLog, between=None) -> list:
    """Read from the log start to the high watermark as a consumer does, 300 bytes a fetch;
    `between(n)` runs after the n-th fetch (the owner cleaning meanwhile)."""
    offset, seen, n = plog.log_start_offset, [], 0
    while offset < plog.high_watermark:
        snap = plog.snapshot()
        piece = reader.read(offset, 300, log_start_offset=snap.log_start_offset,
                            high_watermark=snap.high_watermark,
                            active_base_offset=snap.active_base_offset,
                            active_bytes=snap.active_bytes)
        assert piece.length, offset
        data = os.pread(piece.fd, piece.length, piece.position)
        for header, records in decode_batches(data):
            seen += [(r.offset, r.key, r.value, r.timestamp) for r in records
                     if r.offset >= offset]
            offset = max(offset, header.next_offset)
        n += 1
        if between is not None:
            between(n)
    return seen


@pytest.mark.parametrize("clean_at", [1, 3, 8])
def test_a_reader_mid_log_while_segments_are_swapped(tmp_path, clean_at):
    plog = PartitionLog.open(str(tmp_path / "t-0"), SMALL, now_ms=0)
    try:
        latest = write_updates(plog, 500, 10)
        clean(plog, checkpoint=None, now_ms=NOW)  # small segments: the next run merges them
        latest.update(write_updates(plog, 300, 10, seed=2))
        before = {r[0]: r for r in all_records(plog)}
        clock = [0.0]
        with PartitionReader(plog.directory, retire_delay_ms=60_000,
                             clock=lambda: clock[0]) as reader:
            def between(n):
                if n == clean_at:
                    clean(plog, checkpoint=None, now_ms=NOW)
            seen = _consume(reader, plog, between)
            assert [r[0] for r in seen] == sorted({r[0] for r in seen})
            assert all(before[r[0]] == r for r in seen)
            final = {}
            for offset, key, value, _ in seen:
                final[key] = (offset, value)
            assert final == latest
            clock[0] += 2  # the reader checks its cached files' names every second
            again = _consume(reader, plog)  # after the swaps: the compacted log only
            assert again == all_records(plog)
    finally:
        plog.close()
