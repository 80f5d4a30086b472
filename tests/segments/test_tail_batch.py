"""The batch appended last is found without the index (`LogSegment.tail_batch`), and only
while it is still the last batch: every answer is checked against a scan of the whole file."""

from __future__ import annotations

import random

from appliance.segments import LogConfig, PartitionLog, lookup
from tests.segments.batches import make_batch, random_batch, with_base_offset

DEFAULTS = LogConfig()  # index.interval.bytes 4096: a lookup scans many small batches


def scanned(segment, offset: int):
    """The first batch whose last offset is >= `offset`, by reading every header."""
    for position, header in segment.headers(0, segment.size):
        if header.last_offset >= offset:
            return position, header
    return None


def test_the_batch_appended_last_is_answered_as_a_scan_of_the_file_answers(open_log):
    log = open_log(DEFAULTS)
    rng = random.Random(26)
    for _ in range(400):
        info = log.append(random_batch(rng, max_payload=200), now_ms=0)
        active = log.segments.active
        for offset in range(info.base_offset, info.last_offset + 1):
            expected = scanned(active, offset)
            assert active.tail_batch(offset) == expected
            assert lookup.translate_offset(active, offset) == expected
        if info.base_offset > 0:  # the batch before the last: not the tail's to answer
            assert active.tail_batch(info.base_offset - 1) is None
            assert lookup.translate_offset(active, info.base_offset - 1) == scanned(
                active, info.base_offset - 1)


def test_after_a_truncation_the_old_tail_is_never_answered(open_log):
    log = open_log(DEFAULTS)
    for _ in range(50):
        log.append(make_batch(records=3, payload=b"a" * 100), now_ms=0)
    active = log.segments.active
    last = log.log_end_offset - 1
    assert active.tail_batch(last) is not None
    log.truncate_to(120, now_ms=0)  # inside the log: the batches from offset 120 go
    assert active.tail_batch(last) is None
    assert active.tail_batch(119) is None  # still in the file, but no longer the one appended
    # new batches of another size at the same offsets: each read returns the new bytes
    new = make_batch(records=5, payload=b"b" * 37)
    info = log.append(new, now_ms=0)
    assert (info.base_offset, info.last_offset) == (120, 124)
    for offset in range(120, 125):
        assert active.tail_batch(offset) == scanned(active, offset)
        assert log.read_replica(offset, 1 << 20).read() == with_base_offset(new, 120)
    assert log.read_replica(117, 1 << 20).read()[:8] == (117).to_bytes(8, "big")


def test_a_followers_copy_with_gaps_in_its_offsets(open_log, tmp_path):
    """A follower of a compacted leader appends batches whose offsets skip: an offset in a
    gap belongs to the next batch, which the tail answers only from its own base offset."""
    follower = open_log(DEFAULTS)
    follower.hold_high_watermark = True
    for base, records in ((0, 4), (10, 3), (20, 2)):
        follower.append(with_base_offset(make_batch(records=records, payload=b"c" * 50), base),
                        now_ms=0, assign_offsets=False)
    active = follower.segments.active
    assert active.tail_batch(15) is None  # in the gap before the last batch
    assert lookup.translate_offset(active, 15) == scanned(active, 15)
    assert lookup.translate_offset(active, 15)[1].base_offset == 20
    for offset in (20, 21):
        assert active.tail_batch(offset) == scanned(active, offset)
    assert follower.read_replica(12, 1 << 20).first_offset == 10


def test_a_reopened_log_finds_its_last_batch_through_the_index(open_log, log_dir):
    log = open_log(DEFAULTS)
    for _ in range(30):
        log.append(make_batch(records=2, payload=b"d" * 80), now_ms=0)
    end = log.log_end_offset
    log.close()
    again = PartitionLog.open(log_dir, DEFAULTS, now_ms=0)
    try:
        active = again.segments.active
        assert active.tail_batch(end - 1) is None  # nothing appended by this process yet
        assert lookup.translate_offset(active, end - 1) == scanned(active, end - 1)
        info = again.append(make_batch(records=1, payload=b"e"), now_ms=0)
        assert active.tail_batch(info.base_offset) == scanned(active, info.base_offset)
    finally:
        again.close()
