"""PartitionReader against its oracle, the owner's PartitionLog: the same numbers in, the same
slice out (position, length, first offset, segment, bytes), while the owner appends, rolls,
deletes by retention and truncates. Owner and reader interleave in one process: after each
change the owner's ``snapshot()`` is handed to the reader, as the shm region would."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from appliance.segments import (
    EMPTY_SLICE,
    LogClosedError,
    OffsetOutOfRangeError,
    PartitionReader,
)
from klog.protocol import record_batch as rb

from .batches import random_batch, split_batches
from .conftest import SMALL

SEED = 4_2024
BUDGETS = (0, 1, 100, 700, 2000, 5000, 10**9)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def ring_hint(log, offset: int, ring: int = 4):
    """What the shm region's ring of the active segment's newest index entries answers
    (``PartitionView.lookup``): the largest entry <= offset, (base, 0) when the ring holds the
    whole segment, None when the offset is below the active segment or below the ring."""
    snap = log.snapshot()
    base = snap.active_base_offset
    if offset < base:
        return None
    entries = log.active_index_entries()
    kept = entries[-ring:]
    below = [position for entry_offset, position in kept if entry_offset <= offset]
    if below:
        return base, below[-1]
    return (base, 0) if len(entries) <= ring else None


def _fill(log, rng, count, *, now_ms=0, timestamp=1_000):
    for i in range(count):
        log.append(random_batch(rng, max_payload=800, timestamp=timestamp + 10 * i),
                   now_ms=now_ms)


def _same(log, reader, offset, max_bytes, *, hint=None):
    """The reader answers as the owner does, byte for byte."""
    expected = log.read(offset, max_bytes)
    got = reader.read(offset, max_bytes, **log.snapshot()._asdict(), hint=hint)
    assert (got.position, got.length, got.first_offset, got.segment_base_offset) == (
        expected.position, expected.length, expected.first_offset,
        expected.segment_base_offset), (offset, max_bytes, hint)
    assert got.read() == expected.read()
    assert got.path == expected.path
    return got


def _random_reads(log, reader, rng, count):
    snap = log.snapshot()
    for _ in range(count):
        offset = rng.randint(snap.log_start_offset, snap.high_watermark)
        hint = ring_hint(log, offset) if rng.random() < 0.5 else None
        _same(log, reader, offset, rng.choice(BUDGETS), hint=hint)


def test_the_reader_answers_as_the_owner_while_it_appends_and_rolls(open_log, log_dir):
    rng = random.Random(SEED)
    log = open_log()
    with PartitionReader(log_dir) as reader:
        assert _same(log, reader, 0, 100) == EMPTY_SLICE  # a new, empty log
        for step in range(60):
            _fill(log, rng, rng.randint(1, 4), timestamp=1_000 + 100 * step)
            if step % 17 == 16:
                log.roll(now_ms=0)
            _random_reads(log, reader, rng, 12)
        assert log.segment_count > 5
        stats = reader.statistics()
        assert stats.hinted > 15 and stats.index_lookups > 50  # most offsets are in sealed ones
        assert stats.refreshes >= log.segment_count - 1  # one per roll seen, not one per read
        assert stats.refreshes < 100 and stats.index_mismatches == 0
        # every batch, one at a time
        offset = 0
        while offset < log.log_end_offset:
            offset = rb.read_header(_same(log, reader, offset, 1).read()).next_offset
        # the fds are the reader's own, read-only
        piece = reader.read(0, 1, **log.snapshot()._asdict())
        assert piece.fd != log.read(0, 1).fd
        with pytest.raises(OSError):
            os.write(piece.fd, b"x")


def test_offsets_out_of_range_and_the_high_watermark(open_log, log_dir):
    rng = random.Random(SEED + 1)
    log = open_log()
    _fill(log, rng, 30)
    numbers = log.snapshot()._asdict()
    with PartitionReader(log_dir) as reader:
        with pytest.raises(OffsetOutOfRangeError, match=r"out of range .* \[0, "):
            reader.read(log.log_end_offset + 1, 100, **numbers)
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(-1, 100, **numbers)
        assert reader.read(log.log_end_offset, 100, **numbers) == EMPTY_SLICE
        # a high watermark held below the log end (replication): nothing at or past it
        held = dict(numbers, high_watermark=log.log_end_offset // 2)
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(held["high_watermark"] + 1, 100, **dict(held, log_end_offset=None))
        for offset in range(0, held["high_watermark"]):
            piece = reader.read(offset, 10**9, **held)
            data = piece.read()
            while data:
                header = rb.read_header(data)
                assert header.base_offset < held["high_watermark"]
                data = data[header.size :]
        assert reader.read(held["high_watermark"], 100, **held) == EMPTY_SLICE


def test_nothing_past_the_published_bytes_even_when_the_file_has_more(open_log, log_dir):
    rng = random.Random(SEED + 2)
    log = open_log(dataclasses.replace(SMALL, segment_bytes=1 << 20))
    _fill(log, rng, 20)
    published = log.snapshot()
    expected = {o: log.read(o, 10**9).read() for o in range(published.log_end_offset)}
    _fill(log, rng, 10)  # appended, not yet published
    path = os.path.join(log_dir, f"{published.active_base_offset:020d}.log")
    with open(path, "r+b") as f:  # and a torn write after those
        f.seek(log.snapshot().active_bytes)
        f.write(random_batch(rng, max_payload=800)[:100])
    with PartitionReader(log_dir) as reader:
        for offset, data in expected.items():
            piece = reader.read(offset, 10**9, **published._asdict())
            assert piece.position + piece.length <= published.active_bytes
            assert piece.read() == data
        assert reader.read(published.log_end_offset, 10**9, **published._asdict()) == EMPTY_SLICE
        # a hint into the unpublished part is ignored
        hint = (published.active_base_offset, published.active_bytes + 10)
        assert reader.read(0, 10**9, **published._asdict(), hint=hint).read() == expected[0]


def test_bad_hints_are_ignored(open_log, log_dir):
    rng = random.Random(SEED + 3)
    log = open_log(dataclasses.replace(SMALL, segment_bytes=1 << 20))
    _fill(log, rng, 40)
    base = log.snapshot().active_base_offset
    with PartitionReader(log_dir) as reader:
        for offset in range(0, log.log_end_offset, 3):
            good = ring_hint(log, offset, ring=1000)
            later = [p for o, p in log.active_index_entries() if o > offset]
            for hint in [(base, good[1] + 1), (base, later[-1] if later else 0),
                         (base + 1, good[1]), (base, -5)]:
                _same(log, reader, offset, rng.choice(BUDGETS), hint=hint)


def test_after_retention_deletes_segments(open_log, log_dir):
    rng = random.Random(SEED + 4)
    config = dataclasses.replace(SMALL, retention_bytes=12_000, file_delete_delay_ms=1000)
    log = open_log(config)
    clock = Clock()
    with PartitionReader(log_dir, retire_delay_ms=5_000, clock=clock) as reader:
        _fill(log, rng, 60)
        before = log.snapshot()
        old = {o: reader.read(o, 500, **before._asdict()) for o in (0, 1)}
        _random_reads(log, reader, rng, 30)
        assert log.apply_retention(now_ms=0) > 0
        after = log.snapshot()
        assert after.log_start_offset > 0
        _random_reads(log, reader, rng, 40)
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(after.log_start_offset - 1, 100, **after._asdict())
        # slices handed out before stay readable: the fd outlives the rename
        assert reader.statistics().retired_segments == 0  # nothing noticed yet
        assert old[0].read() and old[1].read()
        # with stale numbers the open descriptor still serves the deleted segment
        assert reader.read(0, 500, **before._asdict()).read() == old[0].read()
        # a refresh (the active segment changed, here by a roll) notices the deletion ...
        _fill(log, rng, 1)
        log.roll(now_ms=0)
        _fill(log, rng, 1)
        _random_reads(log, reader, rng, 5)
        retired = reader.statistics().retired_segments
        assert retired > 0
        assert old[0].read()  # ... and keeps the descriptor for in-flight slices
        clock.now = 6.0
        log.apply_retention(now_ms=10_000)  # the owner removes the .deleted files
        _random_reads(log, reader, rng, 5)
        assert reader.statistics().retired_segments < retired
        with pytest.raises(OSError):
            old[0].read()  # closed after retire_delay_ms
        # stale numbers for a segment that is gone: OffsetOutOfRange, not garbage
        with pytest.raises(OffsetOutOfRangeError, match="deleted meanwhile"):
            reader.read(0, 100, **before._asdict())


def test_after_truncation(open_log, log_dir):
    rng = random.Random(SEED + 5)
    log = open_log()
    with PartitionReader(log_dir) as reader:
        for round_no in range(8):
            _fill(log, rng, rng.randint(5, 40))
            _random_reads(log, reader, rng, 10)
            cut = rng.randint(log.log_start_offset, log.log_end_offset)
            if round_no == 5:
                cut = log.segments.first.base_offset - 1 if log.log_start_offset else 0
            log.truncate_to(max(cut, 0), now_ms=0)
            _random_reads(log, reader, rng, 15)
        assert reader.statistics().refreshes >= 8


def test_offset_for_timestamp_answers_as_the_owner(open_log, log_dir):
    rng = random.Random(SEED + 6)
    log = open_log()
    with PartitionReader(log_dir) as reader:
        for step in range(30):
            _fill(log, rng, rng.randint(1, 5), timestamp=1_000 + 200 * step)
            numbers = log.snapshot()._asdict()
            for ts in [0, 999, 1_000 + 200 * step + 60, 10**13] + [
                    rng.randint(900, 1_000 + 200 * step + 100) for _ in range(6)]:
                assert reader.offset_for_timestamp(ts, **numbers) == log.offset_for_timestamp(ts)
        log.apply_retention(now_ms=0)
        log.truncate_to(log.log_end_offset - 3, now_ms=0)
        numbers = log.snapshot()._asdict()
        for ts in range(900, 1_000 + 200 * 30, 37):
            assert reader.offset_for_timestamp(ts, **numbers) == log.offset_for_timestamp(ts)


def test_a_wrong_index_entry_makes_the_reader_look_up_without_it(open_log, log_dir):
    rng = random.Random(SEED + 7)
    log = open_log()
    _fill(log, rng, 60)
    sealed = log.segments[0]
    path = os.path.join(log_dir, f"{sealed.base_offset:020d}.index")
    entries = os.path.getsize(path) // 8
    assert entries >= 2
    with PartitionReader(log_dir) as reader:
        with open(path, "r+b") as f:  # still monotonic, but 1 byte into the batch
            f.seek(8 * (entries - 1) + 4)
            position = int.from_bytes(f.read(4), "big")
            f.seek(8 * (entries - 1) + 4)
            f.write((position + 1).to_bytes(4, "big"))
        numbers = log.snapshot()._asdict()
        for batch in split_batches(sealed.read_bytes(0, sealed.size)):
            header = rb.read_header(batch)
            for offset in range(header.base_offset, header.next_offset):
                assert reader.read(offset, 1, **numbers).read() == batch
        assert reader.statistics().index_mismatches > 0


def test_close(open_log, log_dir):
    log = open_log()
    _fill(log, random.Random(SEED + 8), 5)
    reader = PartitionReader(log_dir)
    piece = reader.read(0, 100, **log.snapshot()._asdict())
    assert piece.read()
    reader.close()
    reader.close()
    with pytest.raises(OSError):
        piece.read()
    with pytest.raises(LogClosedError):
        reader.read(0, 100, **log.snapshot()._asdict())


def test_a_deleted_partition_directory(tmp_path):
    reader = PartitionReader(str(tmp_path / "gone-0"))
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(0, 100, log_start_offset=0, high_watermark=5, active_base_offset=0,
                    active_bytes=500)
    assert reader.read(5, 100, log_start_offset=0, high_watermark=5, active_base_offset=0,
                       active_bytes=500) == EMPTY_SLICE
    reader.close()


def test_open_descriptors_are_capped(open_log, log_dir):
    rng = random.Random(SEED + 9)
    log = open_log()
    _fill(log, rng, 80)
    assert log.segment_count > 6
    clock = Clock()
    with PartitionReader(log_dir, max_open_segments=3, retire_delay_ms=1000,
                         clock=clock) as reader:
        _random_reads(log, reader, rng, 60)
        stats = reader.statistics()
        assert stats.open_segments <= 3 and stats.retired_segments > 0
        clock.now = 2.0
        _random_reads(log, reader, rng, 1)
        assert reader.statistics().retired_segments <= 1


def test_pread_index_lookups_agree_with_the_owners_maps(open_log, log_dir):
    from appliance.segments.read_only_segment import ReadOnlySegment

    config = dataclasses.replace(SMALL, segment_bytes=1 << 20, index_interval_bytes=0,
                                 segment_index_bytes=1 << 16)
    log = open_log(config)
    rng = random.Random(SEED + 10)
    for i in range(2500):
        log.append(random_batch(rng, max_payload=60, timestamp=1_000 + 3 * i), now_ms=0)
        if i == 1600:
            log.roll(now_ms=0)
    snap = log.snapshot()
    for owner in log.segments:
        view = ReadOnlySegment(log_dir, owner.base_offset)
        active = owner is log.segments.active
        view.bound(snap.active_bytes if active else view.file_size,
                   snap.log_end_offset if active else owner.next_offset)
        assert owner.index.entries > 600  # more than one 4 KiB window
        for _ in range(300):
            target = rng.randint(owner.base_offset - 2, owner.next_offset + 2)
            assert view.index.lookup(target) == owner.index.lookup(target)
            position = rng.randint(-1, owner.size + 10)
            assert view.index.lookup_position(position) == owner.index.lookup_position(position)
            ts = rng.randint(900, 1_000 + 3 * 2500 + 100)
            assert view.time_index.lookup(ts) == owner.time_index.lookup(ts)
        assert view.time_index.last_entry() == owner.time_index.last_entry()
        view.close()


def test_stale_numbers_after_everything_expired(open_log, log_dir):
    rng = random.Random(SEED + 11)
    log = open_log(dataclasses.replace(SMALL, retention_ms=10))
    _fill(log, rng, 30, timestamp=1)
    before = log.snapshot()
    with PartitionReader(log_dir) as reader:
        reader.read(0, 100, **before._asdict())  # the first segment is open, the others not
        assert log.apply_retention(now_ms=10**6) > 0
        assert log.log_start_offset == before.log_end_offset
        with pytest.raises(OffsetOutOfRangeError, match="deleted meanwhile"):
            reader.read(before.log_end_offset - 1, 100, **before._asdict())
        assert reader.read(log.log_end_offset, 100, **log.snapshot()._asdict()) == EMPTY_SLICE
        # the directory damaged by hand: the active segment gone, older ones still there
        _fill(log, rng, 30, timestamp=10**6)
        numbers = log.snapshot()
        os.unlink(os.path.join(log_dir, f"{numbers.active_base_offset:020d}.log"))
        reader.refresh()
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(numbers.log_end_offset - 1, 100, **numbers._asdict())
