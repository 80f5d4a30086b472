"""The typed accessors on a plain buffer (one process): slot allocation and lookup, publish and
read, the hot index ring against an oracle (seeded), fetch-out counters, worker slots and the
status snapshot."""

from __future__ import annotations

import bisect
import random
import struct

import orjson
import pytest

from appliance.shm import (
    FetchOutTable,
    FreeSlotError,
    PartitionTable,
    SlotsFullError,
    WorkerState,
    WorkerTable,
    layout,
    seqlock,
)
from appliance.shm.status import rates, snapshot

from .conftest import SMALL

K = SMALL.index_entries
SEED = 20250601


@pytest.fixture
def table(buffer):
    return PartitionTable(buffer, SMALL)


def test_allocate_find_free(table):
    assert table.find("t", 0) is None
    a = table.allocate_partition("t", 0, owner=1)
    b = table.allocate_partition("t", 1, owner=2)
    assert (a, b) == (0, 1)  # lowest free slot first
    assert table.find("t", 0) == a and table.find("t", 1) == b and table.find("u", 0) is None
    other = PartitionTable(table._buf, SMALL)  # another process's view of the same memory
    assert other.slots() == {("t", 0): a, ("t", 1): b}
    assert other.owned_by(2) == [b] and other.owned_by(3) == []
    table.free_partition(a)
    assert other.find("t", 0) is None  # the generation told it to rescan
    with pytest.raises(FreeSlotError):
        other.read_partition(a)
    with pytest.raises(FreeSlotError):
        table.free_partition(a)
    c = table.allocate_partition("v", 0, owner=0)
    assert c == a and other.find("v", 0) == a
    assert other.read_partition(a).epoch == 2  # reused: a new epoch
    assert other.read_partition(a).topic == "v"


def test_allocation_errors(table):
    table.allocate_partition("t", 0, owner=0)
    with pytest.raises(ValueError, match="already has slot"):
        table.allocate_partition("t", 0, owner=1)
    with pytest.raises(ValueError, match="owner"):
        table.allocate_partition("t", 1, owner=SMALL.max_workers)
    with pytest.raises(ValueError, match="UTF-8 bytes"):
        table.allocate_partition("x" * 300, 0, owner=0)
    for p in range(1, SMALL.max_partitions):
        table.allocate_partition("t", p, owner=p % SMALL.max_workers)
    with pytest.raises(SlotsFullError):
        table.allocate_partition("t", 999, owner=0)


def test_long_topic_round_trip(table):
    topic = "a.b-c_" * 41 + "xyz"  # 249 chars: Kafka's longest name
    slot = table.allocate_partition(topic, 2**31 - 1, owner=3)
    view = table.read_partition(slot)
    assert (view.topic, view.partition, view.owner) == (topic, 2**31 - 1, 3)
    assert not view.published and view.log_end_offset == -1 and view.lookup(0) is None


def test_publish_and_read(table):
    slot = table.allocate_partition("t", 0, owner=1)
    epoch = table.slot_info(slot).epoch
    table.publish_partition(slot, epoch, 0, 5, 5, 0, 700, 700, [(2, 0), (4, 300)], 5, 700)
    table.publish_partition(slot, epoch, 0, 9, 9, 0, 1300, 1300, [(8, 700)], 4, 600)
    view = table.read_partition(slot)
    assert (view.log_start_offset, view.high_watermark, view.log_end_offset) == (0, 9, 9)
    assert (view.active_segment_base_offset, view.active_segment_bytes, view.size_bytes) == (
        0, 1300, 1300)
    assert (view.records_in, view.bytes_in, view.index_total) == (9, 1300, 3)
    assert view.index_entries() == [(2, 0), (4, 300), (8, 700)]
    assert table.lookup_position(slot, 1) == (0, 0)
    assert table.lookup_position(slot, 4) == (0, 300)
    assert table.lookup_position(slot, 7) == (0, 300)
    assert table.lookup_position(slot, 100) == (0, 700)
    # a roll: the new active segment starts an empty ring
    table.publish_partition(slot, epoch, 0, 10, 10, 9, 80, 1380, [], 1, 80)
    view = table.read_partition(slot)
    assert view.index_total == 0 and view.lookup(9) == (9, 0) and view.lookup(8) is None
    assert "index_ring=<0 entries>" in repr(view)


def test_log_seq_moves_with_each_write_of_the_log_part_only(table):
    """What a watch of many partitions compares (worker.py): the log part's sequence moves
    with every publish of its slot, not with another slot's, nor with a read."""
    a = table.allocate_partition("t", 0, owner=1)
    b = table.allocate_partition("t", 1, owner=1)
    other = PartitionTable(table._buf, SMALL)  # another process's view
    epoch = table.slot_info(a).epoch
    before = other.log_seq(a), other.log_seq(b)
    table.publish_partition(a, epoch, 0, 5, 5, 0, 700, 700, [(2, 0)], 5, 700)
    after = other.log_seq(a), other.log_seq(b)
    assert after[0] != before[0] and after[0] % 2 == 0  # written, and not mid-write
    assert after[1] == before[1]
    other.read_partition(a)
    assert other.log_seq(a) == after[0]
    table.publish_partition(a, epoch, 0, 9, 9, 0, 900, 900, [(2, 0)], 4, 200)  # appended
    assert other.log_seq(a) != after[0]


def test_each_workers_publications_move_only_with_its_own_notes(buffer):
    """What lets a watch of other workers' partitions skip its look (worker.py): one counter
    per worker, bumped by that worker only, read in one pass by any."""
    workers = WorkerTable(buffer, SMALL)
    other = WorkerTable(buffer, SMALL)  # another process's view
    assert other.publications() == (0,) * SMALL.max_workers
    workers.note_published(2)
    workers.note_published(2)
    workers.note_published(0)
    assert other.publications() == (1, 0, 2, 0)
    workers.heartbeat(2, 1_000)  # the live part is apart: no publication
    workers.add_worker_counters(2, bytes_in=10, records_in=1)
    assert other.publications() == (1, 0, 2, 0)


def test_bad_values_are_refused_before_the_entry_is_touched(table):
    slot = table.allocate_partition("t", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    table.publish_partition(slot, epoch, 0, 1, 1, 0, 10, 10, [(0, 0)])
    before = table.read_partition(slot)
    off = SMALL.partition_slot(slot) + layout.PARTITION_DIR_BYTES
    for bad in ([(-1, 0)], [(0, 2**32)], [(2**32, 5)]):
        with pytest.raises(ValueError):
            table.publish_partition(slot, epoch, 0, 2, 2, 0, 20, 20, bad)
    with pytest.raises(struct.error):  # a value outside int64
        table.publish_partition(slot, epoch, 0, 2**63, 2, 0, 20, 20)
    assert not seqlock.is_torn(table._buf, off)
    assert table.read_partition(slot) == before
    with pytest.raises(FreeSlotError, match="reallocated"):
        table.publish_partition(slot, epoch + 1, 0, 2, 2, 0, 20, 20)


def test_ring_lookup_matches_an_oracle(table):
    """Random appends of index entries across rolls; every lookup agrees with a brute-force
    search over everything the segment's full index would hold."""
    rng = random.Random(SEED)
    slot = table.allocate_partition("t", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    base, offset, position, full = 0, 0, 0, []
    for step in range(400):
        if rng.random() < 0.03:  # roll
            base, position, full = offset, 0, []
        new = []
        for _ in range(rng.choice((0, 0, 1, 1, 2, 5))):
            offset += rng.randint(1, 50)
            position += rng.randint(1, 4000)
            new.append((offset, position))
        full += new
        table.publish_partition(slot, epoch, 0, offset + 1, offset + 1, base, position,
                                position, new, len(new), 0)
        view = table.read_partition(slot)
        assert view.index_entries() == full[-K:], step
        for target in [rng.randint(max(0, base - 5), offset + 5) for _ in range(20)]:
            assert view.lookup(target) == _oracle(full, base, target, K), (step, target)


def _oracle(full, base, target, k):
    if target < base:
        return None
    keys = [o for o, _ in full]
    i = bisect.bisect_right(keys, target) - 1
    if i < 0:
        return (base, 0) if len(full) <= k else None
    if i < len(full) - k:  # that entry has left the ring
        return None
    return (base, full[i][1])


def test_rewrite_repairs_and_keeps_the_newest_entries(table):
    slot = table.allocate_partition("t", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    off = SMALL.partition_slot(slot) + layout.PARTITION_DIR_BYTES
    seqlock.begin(table._buf, off)  # a writer that died mid-update
    with pytest.raises(seqlock.TornEntryError):
        table.publish_partition(slot, epoch, 0, 1, 1, 0, 1, 1)
    entries = [(100 + 3 * i, 40 * i) for i in range(1, 3 * K)]
    table.rewrite_partition(slot, epoch, 100, 500, 500, 100, 9000, 9000, entries, 400, 9000)
    view = table.read_partition(slot)
    assert view.index_entries() == entries[-K:] and view.index_total == len(entries)
    assert (view.high_watermark, view.records_in) == (500, 400)
    with pytest.raises(FreeSlotError):
        table.rewrite_partition(slot, epoch + 1, 0, 0, 0, 0, 0, 0)


def test_fetch_out_counters(buffer, table):
    out = FetchOutTable(buffer, SMALL)
    slot = table.allocate_partition("t", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    out.add_partition_out(slot, epoch, 1, 1000, 10)
    out.add_partition_out(slot, epoch, 1, 500, 5)
    out.add_partition_out(slot, epoch, 3, 7, 1)
    assert out.partition_out(slot, epoch) == [(0, 0), (1500, 15), (0, 0), (7, 1)]
    table.free_partition(slot)
    slot2 = table.allocate_partition("u", 0, owner=0)
    epoch2 = table.slot_info(slot2).epoch
    assert slot2 == slot and out.partition_out(slot, epoch2) == [(0, 0)] * 4
    out.add_partition_out(slot, epoch2, 1, 1, 1)  # the old count does not carry over
    assert out.partition_out(slot, epoch2)[1] == (1, 1)


def test_worker_slots(buffer):
    workers = WorkerTable(buffer, SMALL)
    workers.set_worker(2, pid=0, port=9094, state=WorkerState.EMPTY, restarts=0,
                       started_at_ms=0, log_dir="/srv/disk2")
    assert workers.workers() == []
    workers.update_worker(2, state=WorkerState.STARTING, restarts=1)
    workers.update_worker(2, pid=4242, started_at_ms=10_000)
    view = workers.read_worker(2)
    assert (view.pid, view.port, view.restarts, view.log_dir) == (4242, 9094, 1, "/srv/disk2")
    assert view.state == WorkerState.STARTING and view.heartbeat_age_ms(12_000) == 2000
    workers.claim_worker(2, pid=4242, now_ms=10_500)
    workers.report_state(2, WorkerState.SERVING, 11_000)
    workers.heartbeat(2, 13_000)
    workers.add_worker_counters(2, bytes_in=100, records_in=2, requests=1)
    workers.add_worker_counters(2, bytes_out=50, records_out=1, requests=1)
    view = workers.read_worker(2)
    assert view.state == WorkerState.SERVING and view.heartbeat_age_ms(14_000) == 1000
    assert (view.bytes_in, view.records_in, view.bytes_out, view.records_out,
            view.requests) == (100, 2, 50, 1, 2)
    # the supervisor reaps it: its state wins over the dead worker's report
    workers.update_worker(2, state=WorkerState.DEAD)
    assert workers.read_worker(2).state == WorkerState.DEAD
    # the next incarnation: counters carry over, the heartbeat is its own
    workers.update_worker(2, state=WorkerState.STARTING, pid=5555, started_at_ms=20_000)
    assert workers.read_worker(2).state == WorkerState.STARTING  # the old report is ignored
    workers.claim_worker(2, pid=5555, now_ms=20_100)
    view = workers.read_worker(2)
    assert view.requests == 2 and view.heartbeat_age_ms(20_200) == 100


def test_torn_live_part_reads_as_no_heartbeat_and_claim_repairs(buffer):
    workers = WorkerTable(buffer, SMALL, timeout_s=0.05)
    workers.set_worker(0, pid=10, port=1, state=WorkerState.STARTING, restarts=0,
                       started_at_ms=1000, log_dir="/d")
    workers.claim_worker(0, pid=10, now_ms=1000)
    workers.add_worker_counters(0, requests=7)
    workers.heartbeat(0, 50_000)
    seqlock.begin(buffer, SMALL.worker_slot(0) + layout.WORKER_LIVE_OFFSET)  # died mid-write
    view = workers.read_worker(0)
    assert view.live_torn and view.heartbeat_age_ms(60_000) == 59_000  # back to the fork time
    with pytest.raises(seqlock.TornEntryError):
        workers.heartbeat(0, 60_000)
    workers.claim_worker(0, pid=11, now_ms=61_000)
    view = workers.read_worker(0)
    assert not view.live_torn and view.requests == 0  # unreadable counters restart at 0
    assert view.live_pid == 11


def test_snapshot_and_rates(buffer, table):
    workers, out = WorkerTable(buffer, SMALL), FetchOutTable(buffer, SMALL)
    layout.write_header(buffer, layout.Header(layout.MAGIC, 1, 4096, SMALL.total_bytes, 4, 64,
                                              8, 0, 1, 0, 0))
    workers.set_worker(0, pid=1, port=9092, state=WorkerState.STARTING, restarts=0,
                       started_at_ms=0, log_dir="/d0")
    slot = table.allocate_partition("t", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    table.publish_partition(slot, epoch, 0, 10, 10, 0, 100, 100, [(3, 0)], 10, 100)
    header = layout.read_header(buffer)
    before = snapshot("/x", header, 1, workers, table, out, now_ms=1000)
    table.publish_partition(slot, epoch, 0, 30, 30, 0, 300, 300, [], 20, 200)
    out.add_partition_out(slot, epoch, 2, 400, 40)
    after = snapshot("/x", header, 1, workers, table, out, now_ms=3000)
    assert rates(before, after)[("t", 0)] == {
        "records_in_per_s": 10.0, "bytes_in_per_s": 100.0,
        "records_out_per_s": 20.0, "bytes_out_per_s": 200.0}
    data = orjson.loads(orjson.dumps(after.to_dict()))
    assert data["partitions"][0]["high_watermark"] == 30
    assert data["partitions"][0]["bytes_out"] == 400
    assert data["workers"][0]["state"] == "STARTING" and data["problems"] == []
