"""The seqlock across real processes: a forked writer in a tight loop never lets a reader see a
torn entry; a writer SIGKILLed between its two sequence bumps (a fault point, or a slow write
killed from outside) costs readers a bounded wait and a TornEntryError, leaves every other
entry readable, and the owner's repair path restores it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from appliance.shm import Geometry, TornEntryError, attach_region, create_region, layout, seqlock

GEOMETRY = Geometry(max_workers=4, max_partitions=32, index_entries=16)
K = GEOMETRY.index_entries
FORK = multiprocessing.get_context("fork")

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def region(shm_name):
    region = create_region(shm_name, GEOMETRY)
    yield region
    region.close()


def _publisher(name: str, slot: int, epoch: int, stop) -> None:
    """Every field a function of one counter n; one new index entry (n, n) per publish."""
    table = attach_region(name).partitions
    n = 0
    while not stop.is_set():
        for _ in range(256):
            table.publish_partition(slot, epoch, n, n, n, 0, n, n, ((n, n),), 1, 1)
            n += 1


def _consistent(view) -> int:
    n = view.high_watermark
    assert (view.log_start_offset, view.log_end_offset, view.active_segment_bytes,
            view.size_bytes) == (n, n, n, n), view
    assert view.records_in == view.bytes_in == view.index_total == n + 1, view
    assert view.index_entries() == [(i, i) for i in range(max(0, n + 1 - K), n + 1)], view
    assert view.lookup(n) == (0, n)
    return n


def test_a_reader_never_sees_a_torn_partition(region):
    table = region.partitions
    table.timeout_s = 5.0  # a loaded machine may preempt the writer mid-update for a while
    slot = table.allocate_partition("hot", 0, owner=1)
    epoch = table.slot_info(slot).epoch
    stop = FORK.Event()
    writer = FORK.Process(target=_publisher, args=(region.name, slot, epoch, stop))
    writer.start()
    try:
        while not table.read_partition(slot).published:
            time.sleep(0.001)
        seen = []
        deadline = time.monotonic() + 20
        while (len(seen) < 200_000 or seen[-1] - seen[0] < 10_000) and \
                time.monotonic() < deadline:
            seen.append(_consistent(table.read_partition(slot)))
    finally:
        stop.set()
        writer.join(10)
    assert writer.exitcode == 0
    assert len(seen) >= 20_000
    assert seen == sorted(seen)  # never backwards
    assert len(set(seen)) > 100, "the writer barely ran while we read"


A_PATTERN, B_PATTERN = 0x00FF00FF00FF00FE, 0xFF00FF00FF00FF00  # any mix of the two is neither


def _flipper(name: str, offset: int, stop) -> None:
    buf = attach_region(name).buf
    while not stop.is_set():
        for _ in range(1024):
            seqlock.store(buf, offset, A_PATTERN)
            seqlock.store(buf, offset, B_PATTERN)


def test_sequence_loads_and_stores_are_atomic(region):
    """The seqlock's premise: a reader only ever loads a value some store wrote. (struct's
    pack_into zeroes the field first: readers saw 0 in 31% of loads, and torn snapshots.)"""
    offset = GEOMETRY.partition_slot(3) + layout.PARTITION_DIR_BYTES
    seqlock.store(region.buf, offset, A_PATTERN)
    stop = FORK.Event()
    writer = FORK.Process(target=_flipper, args=(region.name, offset, stop))
    writer.start()
    try:
        values = []
        load = seqlock.load
        while len(set(values)) < 2:
            values = [load(region.buf, offset) for _ in range(300_000)]
    finally:
        stop.set()
        writer.join(10)
    assert set(values) == {A_PATTERN, B_PATTERN}


def _counter(name: str, index: int, stop) -> None:
    workers = attach_region(name).workers
    workers.claim_worker(index, pid=os.getpid(), now_ms=0)  # heartbeat n after n counts
    n = 1
    while not stop.is_set():
        workers.add_worker_counters(index, bytes_in=1, records_in=1, bytes_out=1,
                                    records_out=1, requests=1)
        workers.heartbeat(index, n)
        n += 1


def test_a_reader_never_sees_torn_worker_counters(region):
    workers = region.workers
    workers.timeout_s = 5.0
    workers.set_worker(1, pid=0, port=1, state=layout.WorkerState.STARTING, restarts=0,
                       started_at_ms=0, log_dir="/d1")
    stop = FORK.Event()
    writer = FORK.Process(target=_counter, args=(region.name, 1, stop))
    writer.start()
    try:
        while workers.read_worker(1).live_pid != writer.pid:
            time.sleep(0.001)
        values: set[int] = set()
        reads, deadline = 0, time.monotonic() + 20
        while (reads < 20_000 or len(values) < 1000) and time.monotonic() < deadline:
            reads += 1
            view = workers.read_worker(1)
            assert not view.live_torn
            assert view.bytes_in == view.records_in == view.bytes_out == view.records_out == \
                view.requests, view  # one update
            assert view.heartbeat_ms in (view.requests - 1, view.requests), view  # the next
            values.add(view.requests)
    finally:
        stop.set()
        writer.join(10)
    assert len(values) > 100


def _die_mid_publish(name: str, slot: int, epoch: int) -> None:
    seqlock.arm("partition.publish.mid_write", lambda: os.kill(os.getpid(), signal.SIGKILL))
    attach_region(name).partitions.publish_partition(slot, epoch, 5, 9, 9, 0, 900, 900,
                                                     ((8, 800),), 4, 400)


def test_writer_killed_mid_publish_then_repaired(region):
    table = region.partitions
    slot = table.allocate_partition("t", 0, owner=1)
    other = table.allocate_partition("t", 1, owner=2)
    epoch = table.slot_info(slot).epoch
    table.publish_partition(slot, epoch, 0, 5, 5, 0, 500, 500, ((4, 400),), 5, 500)
    table.publish_partition(other, table.slot_info(other).epoch, 0, 3, 3, 0, 30, 30)
    child = FORK.Process(target=_die_mid_publish, args=(region.name, slot, epoch))
    child.start()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL

    began = time.monotonic()
    with pytest.raises(TornEntryError, match=r"t-0.*mid-update.*odd"):
        table.read_partition(slot)
    first_wait = time.monotonic() - began
    assert seqlock.DEFAULT_TIMEOUT_S <= first_wait < 2.0
    began = time.monotonic()
    with pytest.raises(TornEntryError):
        table.lookup_position(slot, 4)
    assert time.monotonic() - began < 0.05  # a known-stuck entry fails at once

    assert table.read_partition(other).high_watermark == 3  # the rest of the region is fine
    assert table.find("t", 0) == slot and table.slot_info(slot).owner == 1
    status = region.snapshot()
    assert [p.torn for p in status.partitions] == [True, False]
    assert any("t-0" in problem for problem in status.problems)

    with pytest.raises(TornEntryError):  # an incremental update must not build on it
        table.publish_partition(slot, epoch, 0, 6, 6, 0, 600, 600)
    table.rewrite_partition(slot, table.slot_info(slot).epoch, 0, 9, 9, 0, 900, 900,
                            [(4, 400), (8, 800)], 9, 900)  # the restarted owner, from disk
    view = table.read_partition(slot)
    assert (view.high_watermark, view.index_entries()) == (9, [(4, 400), (8, 800)])
    table.publish_partition(slot, epoch, 0, 10, 10, 0, 1000, 1000, ((9, 950),), 1, 100)
    assert table.lookup_position(slot, 9) == (0, 950)


def _slow(point: str, name: str, index: int, slot: int, epoch: int) -> None:
    region = attach_region(name)
    region.workers.claim_worker(index, pid=os.getpid(), now_ms=1000)
    seqlock.arm(point, lambda: time.sleep(60))  # the test kills us in there
    if point == "worker.live.mid_write":
        region.workers.heartbeat(index, 2000)
    else:
        region.fetch_out.add_partition_out(slot, epoch, index, 100, 1)


@pytest.mark.parametrize("point", ["worker.live.mid_write", "out.mid_write"])
def test_worker_killed_mid_write_from_outside_then_claim_repairs(region, point):
    workers, out = region.workers, region.fetch_out
    slot = region.partitions.allocate_partition("t", 0, owner=0)
    epoch = region.partitions.slot_info(slot).epoch
    out.add_partition_out(slot, epoch, 0, 7, 7)
    workers.set_worker(2, pid=0, port=1, state=layout.WorkerState.STARTING, restarts=0,
                       started_at_ms=500, log_dir="/d2")
    child = FORK.Process(target=_slow, args=(point, region.name, 2, slot, epoch))
    child.start()
    seq_at = (GEOMETRY.worker_slot(2) + layout.WORKER_LIVE_OFFSET
              if point == "worker.live.mid_write" else GEOMETRY.out_table(2))
    deadline = time.monotonic() + 10
    while not seqlock.is_torn(region.buf, seq_at):
        assert time.monotonic() < deadline and child.is_alive()
        time.sleep(0.001)
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)

    began = time.monotonic()
    if point == "worker.live.mid_write":
        view = workers.read_worker(2)
        assert view.live_torn and view.heartbeat_age_ms(10_000) == 9_500
    else:
        assert out.partition_out(slot, epoch)[:3] == [(7, 7), (0, 0), None]
        assert any("worker 2" in p for p in region.snapshot().problems)
    assert time.monotonic() - began < 2.0

    workers.claim_worker(2, pid=4321, now_ms=20_000)  # the next incarnation
    workers.heartbeat(2, 21_000)
    out.add_partition_out(slot, epoch, 2, 5, 5)
    view = workers.read_worker(2)
    assert not view.live_torn and view.live_pid == 4321 and view.heartbeat_ms == 21_000
    assert out.partition_out(slot, epoch)[2][1] >= 5
    assert region.snapshot().problems == []
