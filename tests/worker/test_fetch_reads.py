"""What a Fetch answer carries for a read (handlers/fetch.py): a small read is read into the
answer (one write), a large one stays a file region for sendfile."""

from __future__ import annotations

from appliance.segments import LogConfig, PartitionLog
from appliance.workers.handlers.fetch import INLINE_RECORDS_BYTES, _small_read
from klog.protocol.records import build_batch


def test_a_small_read_is_inlined_and_a_large_one_is_sent_from_the_file(tmp_path):
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1 << 22), now_ms=0)
    try:
        plog.append(build_batch([(1000, None, b"small", [])]), now_ms=0)
        plog.append(build_batch([(1000, None, b"x" * INLINE_RECORDS_BYTES, [])]), now_ms=0)
        small = plog.read(0, 1)  # one whole batch
        assert _small_read(small) == small.read() and len(small.read()) < INLINE_RECORDS_BYTES
        large = plog.read(1, 1)
        assert large.length >= INLINE_RECORDS_BYTES and _small_read(large) is None
    finally:
        plog.close()
