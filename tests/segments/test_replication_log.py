"""The storage engine's side of replication: leader epochs stamped and remembered (Kafka's
leader-epoch-checkpoint), a follower's append that keeps the leader's offsets and epochs, a
read past the high watermark for followers, and the KIP-101/279 truncation rule."""

from __future__ import annotations

import os

import pytest

from appliance.segments import PartitionLog
from appliance.segments.errors import CorruptRecordError
from appliance.segments.leader_epochs import CHECKPOINT_FILE, LeaderEpochCache
from appliance.workers.replication.fetcher import truncation_offset
from klog.protocol.record_batch import scan_batches
from tests.segments.batches import make_batch

from .conftest import SMALL


def leader_log(open_log, epochs: list[tuple[int, int]], payload: bytes = b"") -> PartitionLog:
    """A leader's log: per (epoch, batches) pair, start the epoch and append 2-record batches."""
    log = open_log()
    for epoch, batches in epochs:
        log.start_leader_epoch(epoch)
        for _ in range(batches):
            log.append(make_batch(records=2, payload=payload), now_ms=0, leader_epoch=epoch)
    return log


def test_the_leader_stamps_its_epoch_and_checkpoints_where_each_began(open_log, log_dir):
    log = leader_log(open_log, [(0, 2), (3, 1), (5, 2)])
    data = log.read_replica(0, 1 << 20).read()
    assert [h.partition_leader_epoch for _, h in scan_batches(data)] == [0, 0, 3, 5, 5]
    assert log.leader_epochs.entries == [(0, 0), (3, 4), (5, 6)]
    with open(os.path.join(log_dir, CHECKPOINT_FILE)) as f:
        assert f.read() == "0\n3\n0 0\n3 4\n5 6\n"  # Kafka's own format


@pytest.mark.parametrize(("asked", "answer"), [
    (5, (5, 10)),  # the latest epoch ends at the log end
    (3, (3, 6)),  # an older one where the next begins
    (4, (3, 6)),  # unknown: the largest epoch below it (KIP-279)
    (9, (5, 10)),  # above every epoch known
    (-1, (-1, -1)),
])
def test_end_offset_for_an_epoch(open_log, asked, answer):
    log = leader_log(open_log, [(0, 2), (3, 1), (5, 2)])
    assert log.end_offset_for_epoch(asked) == answer


def test_a_missing_checkpoint_is_rebuilt_from_the_batches(open_log, log_dir):
    log = leader_log(open_log, [(1, 2), (2, 1)])
    log.close()
    os.unlink(os.path.join(log_dir, CHECKPOINT_FILE))
    reopened = PartitionLog.open(log_dir, SMALL, now_ms=0)
    try:
        assert reopened.leader_epochs.entries == [(1, 0), (2, 4)]
        assert os.path.exists(os.path.join(log_dir, CHECKPOINT_FILE))
    finally:
        reopened.close()


def test_truncation_forgets_the_epochs_past_the_new_end(open_log):
    log = leader_log(open_log, [(0, 2), (3, 1), (5, 2)])
    log.truncate_to(6, now_ms=0)
    assert log.log_end_offset == 6
    assert log.leader_epochs.entries == [(0, 0), (3, 4)]
    log.truncate_to(5, now_ms=0)  # whole batches: epoch 3's only batch goes, and the epoch
    assert log.log_end_offset == 4
    assert log.leader_epochs.entries == [(0, 0)]


def test_a_follower_keeps_the_leaders_offsets_and_epochs(open_log, tmp_path):
    leader = leader_log(open_log, [(0, 2), (4, 2)])
    follower = PartitionLog.open(str(tmp_path / "follower-0"), SMALL, now_ms=0)
    try:
        follower.hold_high_watermark = True
        piece = leader.read_replica(0, 1 << 20).read()
        info = follower.append(piece, now_ms=0, assign_offsets=False)
        assert (info.base_offset, info.last_offset) == (0, 7)
        assert follower.read_replica(0, 1 << 20).read() == piece  # byte for byte
        assert follower.leader_epochs.entries == [(0, 0), (4, 4)]
        assert follower.high_watermark == 0  # the leader's responses move it
        assert follower.read(0, 1 << 20).length == 0
        assert follower.set_high_watermark(6)
        visible = [h.base_offset for _, h in scan_batches(follower.read(0, 1 << 20).read())]
        assert visible == [0, 2, 4]  # consumers: up to the high watermark only
        with pytest.raises(CorruptRecordError, match="does not continue"):
            follower.append(piece, now_ms=0, assign_offsets=False)  # offsets 0.. again
        assert follower.log_end_offset == 8
    finally:
        follower.close()


def test_a_followers_append_takes_no_leader_epoch_of_its_own(open_log, tmp_path):
    leader = leader_log(open_log, [(2, 1)])
    follower = PartitionLog.open(str(tmp_path / "follower-0"), SMALL, now_ms=0)
    try:
        with pytest.raises(ValueError, match="leader_epoch must be None"):
            follower.append(leader.read_replica(0, 1 << 20).read(), now_ms=0, leader_epoch=3,
                            assign_offsets=False)
        assert follower.log_end_offset == 0  # nothing written
    finally:
        follower.close()


def test_the_leader_holds_its_high_watermark_for_replication(open_log):
    log = open_log()
    log.hold_high_watermark = True
    log.append(make_batch(records=3), now_ms=0)
    assert (log.log_end_offset, log.high_watermark) == (3, 0)
    assert not log.read(0, 1 << 20)  # consumers: nothing committed yet
    assert log.read_replica(0, 1 << 20).length > 0  # followers: up to the log end
    assert log.set_high_watermark(10) and log.high_watermark == 3  # never past the log end
    assert not log.set_high_watermark(1)  # never back
    log.reset_high_watermark(1)  # ...except for a follower told so by its leader
    assert log.high_watermark == 1
    log.reset_high_watermark(99)
    assert log.high_watermark == 3


def test_truncation_by_the_leaders_epoch_answer(open_log, tmp_path):
    """A follower that led epoch 3 and wrote a tail the new leader (epoch 5) never got."""
    follower = leader_log(open_log, [(0, 2), (3, 2)])  # offsets 0-3 in 0, 4-7 in 3
    # the leader has epoch 3 up to 6 only: cut there, not at the high watermark (0)
    assert truncation_offset(follower, 3, 3, 6) == 6
    # the leader never had epoch 3: its largest epoch below is 0, ending at 4 (KIP-279)
    assert truncation_offset(follower, 3, 0, 4) == 4
    # the leader's epoch 0 went further than ours did: our own end of epoch 0 wins
    assert truncation_offset(follower, 3, 0, 100) == 4
    # more than we have: nothing to cut
    assert truncation_offset(follower, 3, 3, 50) == 8
    # the leader knows no epoch at all: Kafka's fallback, the high watermark
    follower.hold_high_watermark = True
    assert truncation_offset(follower, 3, -1, -1) == follower.high_watermark


def test_an_unreadable_checkpoint_is_rebuilt(open_log, log_dir):
    log = leader_log(open_log, [(2, 1)])
    log.close()
    with open(os.path.join(log_dir, CHECKPOINT_FILE), "w") as f:
        f.write("0\n7\ngarbage\n")
    assert LeaderEpochCache.load(log_dir).entries == []  # no batches given: nothing known
    reopened = PartitionLog.open(log_dir, SMALL, now_ms=0)
    try:
        assert reopened.leader_epochs.entries == [(2, 0)]
    finally:
        reopened.close()


def test_a_read_stops_at_a_high_watermark_that_starts_an_indexed_batch(open_log, log_dir):
    """A high watermark below the log end (a leader waiting for its followers, a follower
    behind its leader) may fall on a batch that has an index entry. A read up to it ends
    there, the entry left alone: taken for a broken one, it made every such Fetch fail after
    rebuilding the index for nothing (seen in tests/faults), and cost the other workers'
    readers a lookup without the index."""
    from appliance.segments import PartitionReader
    log = open_log()
    log.hold_high_watermark = True
    for _ in range(12):
        log.append(make_batch(records=2), now_ms=0)
    indexed = log.active_index_entries()
    assert indexed
    with PartitionReader(log_dir) as reader:
        for last_offset, position in indexed:
            log.reset_high_watermark(last_offset - 1)  # the first offset of that batch
            piece = log.read(0, 1 << 20)
            assert (piece.position, piece.length) == (0, position)
            seen = reader.read(0, 1 << 20, **log.snapshot()._asdict())
            assert (seen.position, seen.length) == (0, position)
        assert reader.statistics().index_mismatches == 0


def test_the_epoch_of_an_offset_and_where_an_epoch_began(open_log):
    log = leader_log(open_log, [(0, 2), (3, 1), (5, 2)])  # epochs begin at 0, 4, 6
    cache = log.leader_epochs
    assert [cache.epoch_for_offset(o) for o in (0, 3, 4, 5, 6, 9)] == [0, 0, 3, 3, 5, 5]
    assert (cache.start_offset_of(3), cache.start_offset_of(4)) == (4, None)
    assert LeaderEpochCache("/nonexistent").epoch_for_offset(7) == -1


def copy_all(leader: PartitionLog, follower: PartitionLog) -> None:
    """What a follower's fetches do: append every batch of the leader past the follower's end."""
    while follower.log_end_offset < leader.log_end_offset:
        follower.append(leader.read_replica(follower.log_end_offset, 4096).read(),
                        now_ms=0, assign_offsets=False)


def test_a_follower_follows_the_leaders_log_start_up_to_its_high_watermark(open_log,
                                                                            tmp_path):
    """The leader moves its log start (a snapshot's DeleteRecords); the follower moves its own
    there too and deletes the segments wholly below it, but never past its high watermark:
    what it has not been told is committed stays. Nothing is written when nothing moves."""
    leader = leader_log(open_log, [(0, 30), (2, 30)], b"x" * 300)  # 120 offsets, 5 segments
    follower_dir = str(tmp_path / "follower-0")
    follower = PartitionLog.open(follower_dir, SMALL, now_ms=0)
    try:
        follower.hold_high_watermark = True
        copy_all(leader, follower)
        segments_before = follower.segment_count
        assert segments_before > 3
        leader.roll(now_ms=0)
        leader.delete_records_before(100, now_ms=0)
        assert leader.log_start_offset == 100
        follower.set_high_watermark(70)
        assert follower.follow_log_start(leader.log_start_offset, now_ms=0) > 0
        assert follower.log_start_offset == 70  # its own high watermark bounds it
        assert follower.segment_count < segments_before
        assert follower.segments.first.base_offset <= 70
        assert follower.leader_epochs.entries == [(2, 70)]  # epoch 2 began at 60, now held
        follower.set_high_watermark(120)
        follower.follow_log_start(leader.log_start_offset, now_ms=0)
        assert follower.log_start_offset == 100
        assert follower.read_replica(100, 1 << 20).read() == \
            leader.read_replica(100, 1 << 20).read()  # the same batches from the start on
        state_file = os.path.join(follower_dir, "partition.state")
        written = os.stat(state_file).st_mtime_ns
        assert follower.follow_log_start(50, now_ms=0) == 0  # behind ours: nothing to do
        assert os.stat(state_file).st_mtime_ns == written
    finally:
        follower.close()
    reopened = PartitionLog.open(follower_dir, SMALL, now_ms=0)
    try:
        assert reopened.log_start_offset == 100  # persisted
    finally:
        reopened.close()


def test_a_follower_behind_the_leaders_log_start_restarts_there(open_log, tmp_path):
    """A follower away while its leader deleted what it would fetch next: its log restarts
    empty at the leader's log start (Kafka's truncateFullyAndStartAt) and continues from
    there with the leader's batches, offsets and epochs."""
    leader = leader_log(open_log, [(0, 20), (3, 40)], b"x" * 300)  # 120 offsets
    fetched_once = leader.read_replica(0, 1).read()  # one batch, before the follower went away
    leader.roll(now_ms=0)
    leader.delete_records_before(90, now_ms=0)
    follower_dir = str(tmp_path / "follower-0")
    follower = PartitionLog.open(follower_dir, SMALL, now_ms=0)
    try:
        follower.append(fetched_once, now_ms=0, assign_offsets=False)  # offsets 0-1
        with pytest.raises(ValueError, match="truncate instead"):
            follower.truncate_fully_and_start_at(1, now_ms=0)
        follower.truncate_fully_and_start_at(leader.log_start_offset, now_ms=0)
        assert (follower.log_start_offset, follower.high_watermark,
                follower.log_end_offset) == (90, 90, 90)
        assert follower.leader_epochs.entries == []
        copy_all(leader, follower)
        assert follower.leader_epochs.entries == [(3, 90)]
        assert follower.read_replica(90, 1 << 20).read() == \
            leader.read_replica(90, 1 << 20).read()
    finally:
        follower.close()
    reopened = PartitionLog.open(follower_dir, SMALL, now_ms=0)
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (90, 120)
    finally:
        reopened.close()

