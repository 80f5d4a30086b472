"""GroupCommitter: many waiters share one fdatasync per dirty log, one wake-up of each loop per
round; errors reach exactly the waiters of the failed sync."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time

import pytest

from appliance.segments import (
    GroupCommitter,
    LogClosedError,
    PartitionLog,
    StorageError,
    faults,
    filesystems,
)
from appliance.segments.group_commit import FILESYSTEM_SYNC_LOGS

from .batches import make_batch
from .conftest import SMALL


def count_wakeups(monkeypatch, loop) -> list:
    """The committer's wake-ups of ``loop`` (its calls of call_soon_threadsafe)."""
    wakeups = []
    real = loop.call_soon_threadsafe
    monkeypatch.setattr(loop, "call_soon_threadsafe",
                        lambda *a: (wakeups.append(a), real(*a))[1])
    return wakeups


def test_waiters_of_one_round_share_one_sync_and_one_wakeup(open_log, monkeypatch):
    log = open_log()
    syncs = []
    syncing, gate = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow_fdatasync(fd):
        syncing.set()
        gate.wait(5)
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)

    async def produce(committer):
        first = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
        # the first round is in its fdatasync: the rest share the next one
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
        wakeups = count_wakeups(monkeypatch, asyncio.get_running_loop())
        started = time.monotonic()
        futures = []
        for _ in range(49):  # rolls included: appends never wait for a running fdatasync
            info = log.append(make_batch(payload=bytes(100)), now_ms=0)
            futures.append(committer.durable(log, info.last_offset))
        assert time.monotonic() - started < 2 and log.segment_count > 1
        gate.set()
        return await first, await asyncio.gather(*futures), len(wakeups)

    with GroupCommitter() as committer:
        first, rest, wakeups = asyncio.run(produce(committer))
        stats = committer.statistics()
    assert (first, rest) == (1, [50] * 49)  # each resolved with the new recovery point
    assert log.recovery_point == 50
    assert wakeups == 2  # one per round, not one per waiter
    assert (stats.requests, stats.immediate, stats.rounds, stats.syncs) == (50, 0, 2, 2)
    assert len(syncs) <= 3  # a roll may have made a second segment dirty


def test_already_durable_is_none(open_log):
    log = open_log()
    log.append(make_batch(records=3), now_ms=0)
    log.flush()

    async def ask(committer):
        return committer.durable(log, 2), committer.durable(log, 3)

    with GroupCommitter() as committer:
        durable, pending = asyncio.run(ask(committer))
        stats = committer.statistics()
    assert durable is None
    assert isinstance(pending, asyncio.Future)  # offset 3 is not even appended: it waits
    assert (stats.requests, stats.immediate) == (2, 1)


def test_several_logs_on_several_loops(open_log, tmp_path):
    logs = [open_log()]
    logs += [PartitionLog.open(str(tmp_path / f"t-{i}"), SMALL, now_ms=0) for i in (1, 2)]
    results = []

    async def appender(committer, log):
        for _ in range(30):
            info = log.append(make_batch(), now_ms=0)
            results.append(await committer.durable(log, info.last_offset))

    with GroupCommitter() as committer:
        threads = [threading.Thread(target=asyncio.run, args=(appender(committer, log),))
                   for log in logs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert sorted(results) == sorted(list(range(1, 31)) * 3)
    for log in logs:
        assert log.recovery_point == 30
    for log in logs[1:]:
        log.close()


def test_a_failed_sync_fails_that_logs_waiters_of_that_round(open_log, tmp_path, monkeypatch):
    """Two logs in one round: the one whose fdatasync fails fails its waiters with the
    StorageError, the other's waiters are resolved; the next request retries the sync."""
    good = open_log()
    bad = PartitionLog.open(str(tmp_path / "bad-0"), SMALL, now_ms=0)
    syncing, gate = threading.Event(), threading.Event()
    real = os.fdatasync
    bad_fd = bad.segments.active.fd
    failed = []

    def fdatasync(fd):
        syncing.set()
        gate.wait(5)
        if fd == bad_fd and not failed:  # the bad log's first sync only
            failed.append(fd)
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def produce(committer):
        blocker = committer.durable(good, good.append(make_batch(), now_ms=0).last_offset)
        # the first round waits at the gate: the next one holds both logs
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
        waiters = []
        for _ in range(3):
            waiters.append(committer.durable(good, good.append(make_batch(), now_ms=0).last_offset))
            waiters.append(committer.durable(bad, bad.append(make_batch(), now_ms=0).last_offset))
        gate.set()
        await blocker
        outcomes = await asyncio.gather(*waiters, return_exceptions=True)
        retried = await committer.durable(bad, bad.log_end_offset - 1)
        return outcomes, retried

    try:
        with GroupCommitter() as committer:
            outcomes, retried = asyncio.run(produce(committer))
            stats = committer.statistics()
    finally:
        bad.close()
    assert outcomes[0::2] == [4, 4, 4]  # the good log's waiters
    failed = outcomes[1::2]
    assert all(isinstance(e, StorageError) and "EIO" in str(e) for e in failed)
    assert failed[0] is failed[1] is failed[2]  # one sync, one error, all its waiters
    assert retried == 3 and stats.failures == 1


WIDE = FILESYSTEM_SYNC_LOGS + 3  # logs in one round: beyond the filesystem sync's bar


def wide_rounds(tmp_path, monkeypatch, rounds=1, arrange=None, log_dirs=True):
    """WIDE logs under `tmp_path`, each round one append to each and their waiters in one
    round of the committer (the round before waits in its fdatasync); `arrange()` runs
    before each such round starts. The committer knows `tmp_path` as its log dir when
    `log_dirs`. Returns, per round, (each waiter's outcome, the fdatasync calls of the
    round), the logs' recovery points, and the statistics."""
    blocker = PartitionLog.open(str(tmp_path / "blocker-0"), SMALL, now_ms=0)
    logs = [PartitionLog.open(str(tmp_path / f"wide-{i}"), SMALL, now_ms=0)
            for i in range(WIDE)]
    syncing, gate = threading.Event(), threading.Event()
    synced = []
    real = os.fdatasync

    def fdatasync(fd):
        syncing.set()
        gate.wait(5)
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def produce(committer):
        results = []
        for _ in range(rounds):
            syncing.clear()
            gate.clear()
            first = committer.durable(blocker, blocker.append(make_batch(), now_ms=0)
                                      .last_offset)
            await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
            waiters = [committer.durable(log, log.append(make_batch(records=2), now_ms=0)
                                         .last_offset) for log in logs]
            if arrange is not None:
                arrange()
            synced.clear()
            gate.set()
            await first
            outcomes = await asyncio.gather(*waiters, return_exceptions=True)
            results.append((outcomes, [fd for fd in synced if fd != blocker.segments.active.fd]))
        return results

    try:
        with GroupCommitter(log_dirs=[str(tmp_path)] if log_dirs else ()) as committer:
            results = asyncio.run(produce(committer))
            stats = committer.statistics()
        return results, [log.recovery_point for log in logs], stats
    finally:
        blocker.close()
        for log in logs:
            log.close()


@pytest.mark.skipif(not filesystems.REPORTS_ERRORS,
                    reason="syncfs reports writeback errors only from Linux 5.8: not used before")
def test_many_logs_of_one_filesystem_share_one_syncfs(tmp_path, monkeypatch):
    """A producer writing one batch to each of many partitions with acks=all: their logs'
    round is made durable by one syncfs of the filesystem, not one fdatasync each, and each
    waiter gets its log's new recovery point."""
    [(outcomes, synced)], points, stats = wide_rounds(tmp_path, monkeypatch)
    assert outcomes == [2] * WIDE and points == [2] * WIDE
    assert synced == []  # no fdatasync of any of them
    assert stats.filesystem_syncs == 1 and stats.syncs == 2  # the blocker's, then the syncfs


def test_without_its_log_dirs_the_committer_syncs_each_log(tmp_path, monkeypatch):
    """A syncfs reports only the errors that came after its descriptor was opened: a
    committer not told its log dirs at start (so before any append) never uses one."""
    [(outcomes, synced)], points, stats = wide_rounds(tmp_path, monkeypatch, log_dirs=False)
    assert outcomes == [2] * WIDE and len(synced) == WIDE
    assert stats.filesystem_syncs == 0


def test_a_failed_syncfs_syncs_each_log_on_its_own_from_then_on(tmp_path, monkeypatch):
    """A syncfs that fails says nothing of which file: every log of it is synced on its
    own, so each waiter gets its own log's outcome (here all succeed, the injected error
    being the syncfs's alone); and later rounds of that filesystem sync each log too, since
    the descriptor has had its one report of the error."""
    def fail_the_first_syncfs():
        if not armed:
            armed.append(True)
            faults.arm("log.flush.before_sync", OSError(errno.EIO, "injected"))
    armed: list = []
    results, points, stats = wide_rounds(tmp_path, monkeypatch, rounds=2,
                                         arrange=fail_the_first_syncfs)
    assert [outcomes for outcomes, _ in results] == [[2] * WIDE, [4] * WIDE]
    assert [len(synced) for _, synced in results] == [WIDE, WIDE]
    assert stats.filesystem_syncs == 0 and points == [4] * WIDE


def test_a_log_cut_while_its_filesystem_syncs_is_synced_on_its_own(open_log):
    """What the syncfs made durable is the log end read before it began; a log whose end
    was cut meanwhile (a follower's truncation) may have had those offsets written again
    after: it is not marked durable by that sync."""
    log = open_log()
    for _ in range(3):
        log.append(make_batch(), now_ms=0)
    before = log.unsynced_end()
    log.truncate_to(1, now_ms=0)
    log.append(make_batch(records=3), now_ms=0)
    assert log.synced_through(before) is None and log.recovery_point <= 1
    ends = log.unsynced_end()
    assert log.synced_through(ends) == 4 == log.recovery_point
    assert log.unsynced_end() is None  # durable through its end


def test_storage_errors_reach_the_waiters(open_log, monkeypatch):
    log = open_log()

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)

    async def produce(committer):
        await committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)

    with GroupCommitter() as committer, pytest.raises(StorageError, match="fdatasync .*EIO"):
        asyncio.run(produce(committer))
    assert log.recovery_point == 0


def test_an_injected_failure_then_a_retry(open_log):
    log = open_log()

    async def produce(committer):
        info = log.append(make_batch(), now_ms=0)
        faults.arm("log.flush.before_sync", OSError(errno.EIO, "injected"))
        with pytest.raises(StorageError, match="injected|EIO"):
            await committer.durable(log, info.last_offset)
        assert log.recovery_point == 0
        return await committer.durable(log, info.last_offset)

    with GroupCommitter() as committer:
        assert asyncio.run(produce(committer)) == 1
        assert committer.statistics().failures == 1


@pytest.mark.parametrize("when", ["queued", "syncing"])
def test_a_waiter_that_gives_up_leaves_the_committer_serving(open_log, monkeypatch, when):
    """A waiter cancelled (its client went away mid-produce or mid-commit) before its round
    or while it syncs: the sync is made anyway, the committer leaves the cancelled future
    alone and serves the others. Settling it anyway raised InvalidStateError and killed the
    sync thread, so every later acks=all produce and offset commit of that worker waited
    forever (seen in tests/faults)."""
    log = open_log()
    syncing, gate = threading.Event(), threading.Event()
    real = os.fdatasync

    def slow_fdatasync(fd):
        syncing.set()
        gate.wait(5)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    committer = GroupCommitter()

    async def give_up() -> int:
        busy = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
        if when == "syncing":  # the round that holds it is running
            request, other = busy, None
        else:  # it waits for the next round, with another waiter of the same round
            request = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
            other = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
        request.cancel()
        gate.set()
        if other is not None:
            assert await asyncio.wait_for(other, 5) == log.log_end_offset
        else:
            await asyncio.sleep(0.2)
        assert request.cancelled()
        later = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
        return await asyncio.wait_for(later, 5)

    try:
        assert asyncio.run(give_up()) == log.log_end_offset
    finally:
        gate.set()
        committer.close(5)


def test_close_serves_what_is_pending_and_closed_logs_fail(open_log):
    log = open_log()
    committer = GroupCommitter()

    async def close_while_waiting():
        synced = committer.durable(log, log.append(make_batch(), now_ms=0).last_offset)
        committer.close()
        return await synced

    assert asyncio.run(close_while_waiting()) == 1
    log.append(make_batch(), now_ms=0)
    log.close()

    async def on_a_closed_log(another):
        await another.durable(log, 1)

    with GroupCommitter() as another, pytest.raises(LogClosedError):
        asyncio.run(on_a_closed_log(another))


def test_refused_when_closed_or_off_a_loop(open_log):
    log = open_log()
    committer = GroupCommitter()
    with pytest.raises(RuntimeError, match="no running event loop"):
        committer.durable(log, 0)
    committer.close()
    committer.close()  # idempotent

    async def ask():
        committer.durable(log, 0)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(ask())
