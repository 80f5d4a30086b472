"""A read that stops before a batch remembers it (`LogSegment.batch_after_read`): the next read
in order, a catching-up follower's, starts there without the index. Every answer is checked
against a scan of the whole file, and a truncation forgets the position."""

from __future__ import annotations

import random

from appliance.segments import LogConfig, lookup
from tests.segments.batches import make_batch, random_batch, with_base_offset
from tests.segments.test_tail_batch import scanned

DEFAULTS = LogConfig()


def test_reads_in_order_start_where_the_last_one_stopped_as_the_index_says(open_log):
    log = open_log(DEFAULTS)
    rng = random.Random(27)
    for _ in range(300):
        log.append(random_batch(rng, max_payload=3000), now_ms=0)
    active = log.segments.active
    on_disk = dict(active.headers(0, active.size))  # position -> header, every batch
    copied, offset, reads = [], 0, 0
    while offset < log.log_end_offset:  # as a follower copies: each read where the last ended
        piece = log.read_replica(offset, 20_000)
        copied.append(piece.read())
        reads += 1
        end = piece.position + piece.length
        if end == active.size:
            break
        header = on_disk[end]  # the batch the read stopped before
        assert active.batch_after_read(header.base_offset) == (end, header)
        assert lookup.translate_offset(active, header.base_offset) == (end, header)
        assert scanned(active, header.base_offset) == (end, header)
        offset = header.base_offset
    assert reads > 20
    assert b"".join(copied) == active.read_bytes(0, active.size)  # nothing skipped or twice


def test_only_the_offset_that_starts_the_remembered_batch_uses_it(open_log):
    log = open_log(DEFAULTS)
    for _ in range(20):
        log.append(make_batch(records=4, payload=b"a" * 500), now_ms=0)
    active = log.segments.active
    piece = log.read_replica(0, 2500)  # four batches of 4 records fit, the fifth does not
    assert piece.first_offset == 0
    assert active.batch_after_read(16) is not None
    for offset in (15, 17, 18):  # inside the batch before it, or inside the batch itself
        assert active.batch_after_read(offset) is None
        assert lookup.translate_offset(active, offset) == scanned(active, offset)


def test_after_a_truncation_the_remembered_batch_is_forgotten(open_log):
    log = open_log(DEFAULTS)
    for _ in range(40):
        log.append(make_batch(records=3, payload=b"a" * 400), now_ms=0)
    active = log.segments.active
    log.read_replica(0, 1500)  # stops before the batch at offset 9
    assert active.batch_after_read(9) is not None
    log.truncate_to(6, now_ms=0)
    assert active.batch_after_read(9) is None
    # other batches at the same offsets: a read from 9 returns the new bytes
    new = make_batch(records=5, payload=b"b" * 90)
    log.append(new, now_ms=0)
    log.append(new, now_ms=0)
    assert log.read_replica(9, 1 << 20).read()[:len(new)] == with_base_offset(new, 6)
    assert lookup.translate_offset(active, 9) == scanned(active, 9)
