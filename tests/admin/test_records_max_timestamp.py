"""PartitionLog.offset_of_max_timestamp (KIP-734's ListOffsets -3) on a log of several small
segments: the first record with the largest timestamp, inside its batch; never at or past the
end offset asked (the high watermark), then the largest below it is searched in every segment;
never below the log start."""

from __future__ import annotations

from appliance.segments import LogConfig, PartitionLog
from klog.protocol.records import build_batch

SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=1024,
                  retention_ms=-1, file_delete_delay_ms=1000)
BASE = 1_700_000_000_000


def _log(tmp_path, stamps_per_batch: list[list[int]]) -> PartitionLog:
    log = PartitionLog.open(str(tmp_path / "t-0"), SMALL, now_ms=BASE, verify="tail")
    for stamps in stamps_per_batch:
        log.append(build_batch([(BASE + s, None, b"v" * 40, []) for s in stamps]), now_ms=BASE)
    log.set_high_watermark(log.log_end_offset)
    return log


def test_the_first_record_with_the_largest_timestamp(tmp_path):
    batches = [[i, i + 1, i + 2] for i in range(0, 60, 3)]  # offsets 0..59, stamps 0..59
    batches[4] = [12, 500, 14]  # offset 13: the largest
    batches[15] = [45, 46, 500]  # offset 47: as large, later
    log = _log(tmp_path, batches)
    try:
        assert len(list(log.segments)) > 2
        assert log.offset_of_max_timestamp(log.high_watermark) == (13, BASE + 500)
        # not yet below the end asked: the largest below it, searched in every segment
        assert log.offset_of_max_timestamp(13) == (11, BASE + 11)
        log.delete_records_before(20, now_ms=BASE)
        assert log.offset_of_max_timestamp(log.high_watermark) == (47, BASE + 500)
    finally:
        log.close()


def test_an_empty_log_has_none(tmp_path):
    log = PartitionLog.open(str(tmp_path / "e-0"), SMALL, now_ms=BASE, verify="tail")
    try:
        assert log.offset_of_max_timestamp(0) is None
    finally:
        log.close()
