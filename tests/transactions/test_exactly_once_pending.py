"""Pending transactional offsets without an appliance: `PendingOffsets` and the replay of a
``__consumer_offsets`` log (`LoadedPartition`, `replay`) agree on what a marker commits,
what an abort drops, what a later write supersedes, and what stays pending."""

from __future__ import annotations

from appliance.workers.groups.offsets_log import Committed, LoadedPartition, offset_record, replay
from appliance.workers.groups.pending import PendingOffsets
from klog.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, control_record


def c(offset: int) -> Committed:
    return Committed(offset, -1, None, 0)


def test_commit_moves_abort_drops_and_other_groups_wait():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): c(5)})
    pending.add(7, 0, "h", {("t", 0): c(6)})
    pending.add(8, 1, "g", {("t", 1): c(9)})
    assert pending.keys_of("g") == {("t", 0), ("t", 1)}
    assert pending.complete(7, lambda group: group == "g") == {"g": {("t", 0): c(5)}}
    assert pending.keys_of("h") == {("t", 0)}  # another partition's group: its own marker
    assert pending.complete(8, lambda group: True) == {"g": {("t", 1): c(9)}}
    assert list(pending.of_groups(lambda group: True)) == [(7, 0, "h", {("t", 0): c(6)})]


def test_a_later_write_supersedes_other_producers_pending_ones():
    pending = PendingOffsets()
    pending.add(7, 0, "g", {("t", 0): c(5), ("t", 1): c(5)})
    pending.add(8, 0, "g", {("t", 0): c(6)})  # a later transactional write of t-0
    pending.supersede("g", [("t", 1)])  # a later plain OffsetCommit of t-1
    assert pending.complete(7, lambda group: True) == {}
    assert pending.complete(8, lambda group: True) == {"g": {("t", 0): c(6)}}
    assert not pending


class _Log:
    """What `replay` reads: batches at consecutive offsets."""

    def __init__(self):
        self.data = b""
        self.log_start_offset = 0
        self.log_end_offset = 0

    def add(self, batch_records=None, *, producer=None, marker=None):
        """Plain records, a producer's transactional records, or its marker
        (``(producer id, commit)``), at the log end."""
        if marker is not None:
            producer, commit = marker
            batch_records = [_control(commit)]
        transactional = {} if producer is None else {
            "producer_id": producer, "producer_epoch": 0, "is_transactional": True,
            "base_sequence": -1 if marker is not None else 0}
        self.data += build_batch([(0, k, v, ()) for k, v in batch_records], now_ms=0,
                                 base_offset=self.log_end_offset,
                                 is_control=marker is not None, **transactional)
        self.log_end_offset += len(batch_records)

    def read_replica(self, offset, max_bytes):
        data = self.data if offset == 0 else b""
        return _Piece(data)


def _control(commit: bool):
    return control_record(CONTROL_COMMIT if commit else CONTROL_ABORT, 0)


class _Piece:
    def __init__(self, data):
        self.data = data

    def __bool__(self):
        return bool(self.data)

    def read(self):
        return self.data


def test_replay_commits_drops_and_keeps_open_transactions_pending():
    log = _Log()
    log.add([offset_record("g", "t", 0, c(1))])  # plain
    log.add([offset_record("g", "t", 0, c(10)), offset_record("g", "t", 1, c(11))],
            producer=7)
    log.add([offset_record("g", "t", 2, c(20))], producer=8)
    log.add(marker=(8, False))  # aborted: t-2 never committed
    log.add(marker=(7, True))  # committed
    log.add([offset_record("g", "t", 3, c(30))], producer=9)  # still open
    state = LoadedPartition()
    for _ in replay(log, state):
        pass
    assert state.offsets["g"] == {("t", 0): c(10), ("t", 1): c(11)}
    assert state.pending.keys_of("g") == {("t", 3)}
    assert state.skipped == 0  # markers are understood, not skipped as foreign records
