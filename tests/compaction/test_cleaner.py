"""The cleaner core on real logs, without a worker: what it keeps (each key's latest record at
its own offset, young tombstones, producers' last batches, transactions as Kafka decides),
what it drops, its map's bound, a corrupt batch, and a log that reopens as it was left."""

from __future__ import annotations

import dataclasses
import os

import pytest

from appliance.segments import PartitionLog
from appliance.segments.cleaner import CleanerSettings, clean, install, prepare, run
from appliance.segments.errors import CorruptRecordError
from appliance.segments.txn_index import AbortedTxn
from appliance.workers.replication.markers import marker_batch
from klog.protocol.records import build_batch, decode_batch

from .logs import SMALL, all_headers, all_records, assert_compacted, write_updates

NOW = 10_000


@pytest.fixture
def plog(tmp_path):
    opened = PartitionLog.open(str(tmp_path / "t-0"), SMALL, now_ms=0)
    yield opened
    opened.close()


def test_each_key_keeps_its_latest_record_at_its_offset(plog, tmp_path):
    latest = write_updates(plog, 600, 20)
    before, end = all_records(plog), plog.log_end_offset
    segments = plog.segment_count
    result = clean(plog, checkpoint=None, now_ms=NOW)
    assert result is not None and result.swaps and result.cleaned_through > 0
    after = all_records(plog)
    assert_compacted(before, after, latest)
    cleaned = [r for r in after if r[0] < result.cleaned_through]
    assert len({r[1] for r in cleaned}) == len(cleaned)  # one record per key below the mark
    assert plog.log_end_offset == end and plog.segment_count == segments  # full: no merging
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".swap", ".cleaned"))]
    plog.close()
    reopened = PartitionLog.open(plog.directory, SMALL, now_ms=NOW)
    try:
        assert all_records(reopened) == after and reopened.log_end_offset == end
    finally:
        reopened.close()


def test_a_second_run_starts_at_the_checkpoint_and_changes_no_record(plog):
    latest = write_updates(plog, 400, 10)
    first = clean(plog, checkpoint=None, now_ms=NOW)
    after_first = all_records(plog)
    latest.update(write_updates(plog, 400, 10, seed=2))
    before = all_records(plog)
    second = clean(plog, checkpoint=first.cleaned_through, now_ms=NOW)
    assert second.cleaned_through > first.cleaned_through
    assert_compacted(before, all_records(plog), latest)
    assert clean(plog, checkpoint=second.cleaned_through, now_ms=NOW) is None  # nothing dirty
    assert_compacted(before, after_first, {})  # (the first run's output is a valid log too)


def test_compressed_batches_are_recompressed_with_their_codec(plog):
    latest = write_updates(plog, 300, 5, per_batch=10, codec=1)
    before = all_records(plog)
    clean(plog, checkpoint=None, now_ms=NOW)
    assert_compacted(before, all_records(plog), latest)
    assert {h.codec for h in all_headers(plog) if h.records_count} == {1}


def test_old_tombstones_go_young_ones_stay(plog):
    latest = write_updates(plog, 300, 10, tombstone_every=7, now_ms=1_000)
    young = write_updates(plog, 60, 10, seed=3, tombstone_every=5, now_ms=NOW)
    latest.update(young)
    plog.roll(now_ms=NOW)
    before = all_records(plog)
    clean(plog, checkpoint=None, now_ms=NOW + 500)  # horizon NOW - 500: the first ones are old
    after = all_records(plog)
    assert_compacted(before, after, latest)
    tombstones = [r for r in after if r[2] is None]
    assert tombstones and all(r[3] >= NOW for r in tombstones)
    assert {r[0] for r in tombstones} == {o for o, v in young.values() if v is None}


def test_a_producers_last_batch_stays_as_an_empty_header(plog):
    for seq in range(0, 30, 3):
        plog.append(build_batch([(1_000, b"k", b"v%d" % i, ()) for i in range(3)],
                                producer_id=42, producer_epoch=3, base_sequence=seq),
                    now_ms=1_000)
    last = all_headers(plog)[-1]
    plog.append(build_batch([(1_000, b"k", b"final", ())]), now_ms=1_000)  # supersedes k
    plog.roll(now_ms=NOW)
    clean(plog, checkpoint=None, now_ms=NOW,
          last_batch_of_producer={42: last.last_offset})
    headers = all_headers(plog)
    kept = [h for h in headers if h.producer_id == 42]
    assert [(h.base_offset, h.last_offset_delta, h.producer_epoch, h.base_sequence,
             h.records_count) for h in kept] == [(last.base_offset, 2, 3, 27, 0)]
    assert [r[2] for r in all_records(plog)] == [b"final"]


def test_aborted_data_goes_and_markers_stay_until_their_data_is_gone(plog):
    plog.append(build_batch([(1_000, b"a", b"committed", ())], producer_id=1, producer_epoch=0,
                            base_sequence=0, is_transactional=True), now_ms=1_000)
    aborted = plog.append(build_batch([(1_000, b"b", b"aborted", ())], producer_id=2,
                                      producer_epoch=0, base_sequence=0, is_transactional=True),
                          now_ms=1_000)
    plog.append(marker_batch(1, 0, True, 0, 1_000), now_ms=1_000)
    abort = plog.append(marker_batch(2, 0, False, 0, 1_000), now_ms=1_000)
    plog.add_aborted_txn(AbortedTxn(2, aborted.base_offset, abort.base_offset,
                                    abort.base_offset + 1))
    plog.append(build_batch([(1_000, b"c", b"plain", ())]), now_ms=1_000)
    plog.roll(now_ms=1_000)
    clean(plog, checkpoint=None, now_ms=1_500, force=True)  # markers within the horizon
    assert [r[2] for r in all_records(plog) if r[1] in (b"a", b"b", b"c")] == [
        b"committed", b"plain"]
    assert sum(h.is_control for h in all_headers(plog)) == 2
    # the committed data is superseded: this run removes it (traversing it keeps its
    # marker, as Kafka's), the next finds the marker empty and past the horizon
    plog.append(build_batch([(NOW, b"a", b"newer", ())]), now_ms=NOW)
    plog.roll(now_ms=NOW)
    clean(plog, checkpoint=None, now_ms=NOW + 5_000, force=True)
    assert [h.producer_id for h in all_headers(plog) if h.is_control] == [1]
    clean(plog, checkpoint=None, now_ms=NOW + 5_000, force=True)
    assert not [h for h in all_headers(plog) if h.is_control]
    assert [r[2] for r in all_records(plog)] == [b"plain", b"newer"]


def test_nothing_at_or_past_the_first_unstable_offset_is_cleaned(plog):
    write_updates(plog, 200, 3)
    plog.roll(now_ms=NOW)
    plog.first_unstable_offset = 50
    before = all_records(plog)
    result = clean(plog, checkpoint=None, now_ms=NOW, force=True)
    if result is not None:
        assert result.cleaned_through <= 50
    assert [r for r in all_records(plog) if r[0] >= 50] == [r for r in before if r[0] >= 50]


def test_a_small_dedupe_buffer_cleans_in_steps(plog):
    latest = write_updates(plog, 600, 200)
    before = all_records(plog)
    settings = CleanerSettings(dedupe_buffer_bytes=24 * 100)  # 90 keys
    first = clean(plog, checkpoint=None, now_ms=NOW, settings=settings)
    assert 0 < first.cleaned_through < plog.segments.active.base_offset
    second = clean(plog, checkpoint=first.cleaned_through, now_ms=NOW, settings=settings)
    assert second.cleaned_through > first.cleaned_through
    assert_compacted(before, all_records(plog), latest)


def test_a_corrupt_batch_stops_the_run_and_leaves_the_log_as_it_was(plog):
    write_updates(plog, 300, 10)
    victim = plog.segments[1]
    with open(victim.path, "r+b") as file:
        file.seek(100)
        byte = file.read(1)
        file.seek(100)
        file.write(bytes([byte[0] ^ 0xFF]))
    job = prepare(plog, checkpoint=None, now_ms=NOW)
    with pytest.raises(CorruptRecordError) as raised:
        run(job, CleanerSettings())
    assert victim.path in str(raised.value)
    assert not [n for n in os.listdir(plog.directory) if n.endswith((".swap", ".cleaned"))]


def test_a_swap_whose_segments_changed_is_discarded(plog):
    write_updates(plog, 300, 10)
    job = prepare(plog, checkpoint=None, now_ms=NOW)
    result = run(job, CleanerSettings())
    plog.truncate_to(plog.segments[1].base_offset + 1, now_ms=NOW)  # a follower's truncation
    install(plog, result, now_ms=NOW)
    assert not [n for n in os.listdir(plog.directory) if n.endswith(".swap")]
    assert plog.log_end_offset <= plog.segments[1].next_offset


def test_a_follower_copies_a_compacted_leaders_gaps(plog, tmp_path):
    latest = write_updates(plog, 300, 5)
    clean(plog, checkpoint=None, now_ms=NOW)
    follower = PartitionLog.open(str(tmp_path / "f-0"), dataclasses.replace(SMALL), now_ms=0)
    try:
        for where, header in plog.iter_batch_headers():
            follower.append(plog.read_batch(where, header.size), now_ms=NOW,
                            assign_offsets=False)
        assert all_records(follower) == all_records(plog)
        assert follower.log_end_offset == plog.log_end_offset
        assert {r[1]: r[2] for r in all_records(follower)} == {
            k: v for k, (_, v) in latest.items()}
    finally:
        follower.close()


def test_decoding_a_cleaned_batch_gives_the_original_records(plog):
    write_updates(plog, 100, 4, per_batch=5)
    before = {r[0]: r for r in all_records(plog)}
    clean(plog, checkpoint=None, now_ms=NOW)
    for where, header in plog.iter_batch_headers():
        data = plog.read_batch(where, header.size)
        _, records = decode_batch(data)  # CRC and counts check
        for r in records:
            assert before[r.offset] == (r.offset, r.key, r.value, r.timestamp)


def test_a_restarted_owner_attaches_to_a_cleaned_log_with_empty_segments(plog):
    write_updates(plog, 600, 3)  # three keys: most cleaned segments end up empty
    clean(plog, checkpoint=None, now_ms=NOW)
    assert any(s.size == 0 for s in plog.segments)
    before, point = all_records(plog), plog.snapshot().attach_point()
    plog.close()
    reopened = PartitionLog.open(plog.directory, SMALL, now_ms=NOW, attach=point)
    try:
        assert reopened.recovery.attach_refused is None, reopened.recovery.attach_refused
        assert all_records(reopened) == before
    finally:
        reopened.close()


def test_the_logs_size_after_cleaning_is_what_its_segments_hold(plog):
    """The log's size is kept as a count (segment_list.py), not summed per append: the
    cleaner's swaps (segments shrunk to a few records) must leave it equal to the live
    segments' bytes, and appends after the swaps must keep it there."""
    write_updates(plog, 2000, 5)
    before = plog.size_bytes
    result = clean(plog, checkpoint=None, now_ms=NOW)
    assert result is not None and result.swaps
    assert plog.size_bytes == sum(segment.size for segment in plog.segments) < before // 2
    write_updates(plog, 200, 5, seed=2, now_ms=NOW)
    assert plog.size_bytes == sum(segment.size for segment in plog.segments)
