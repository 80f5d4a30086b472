"""GroupCommitter: many requests share one fdatasync per dirty log; errors reach the waiters."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time

import pytest

from appliance.segments import GroupCommitter, StorageError, faults

from .batches import make_batch


def test_requests_resolve_once_durable_and_share_syncs(open_log, monkeypatch):
    log = open_log()
    syncs = []
    gate = threading.Event()
    real = os.fdatasync

    def slow_fdatasync(fd):
        gate.wait(5)
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    with GroupCommitter() as committer:
        futures = []
        started = time.monotonic()
        for _ in range(50):  # rolls included: appends never wait for a running fdatasync
            info = log.append(make_batch(payload=bytes(100)), now_ms=0)
            futures.append(committer.request(log, info.last_offset))
        assert time.monotonic() - started < 2 and log.segment_count > 1
        gate.set()
        assert [f.result(5) for f in futures][-1] == 50
        stats = committer.statistics()
    assert log.recovery_point == 50
    assert stats.requests == 50 and stats.syncs <= 2  # the first round may start before the rest
    assert len(syncs) <= 3  # a roll may have made a second segment dirty
    with GroupCommitter() as committer:  # already durable: resolved at once
        assert committer.request(log, 10).result(0) == 50
        assert committer.statistics().immediate == 1


def test_several_logs_and_threads(open_log, tmp_path):
    from appliance.segments import PartitionLog

    from .conftest import SMALL

    logs = [open_log()]
    logs += [PartitionLog.open(str(tmp_path / f"t-{i}"), SMALL, now_ms=0) for i in (1, 2)]
    with GroupCommitter() as committer:
        results = []

        def appender(log):
            for _ in range(30):
                info = log.append(make_batch(), now_ms=0)
                results.append(committer.request(log, info.last_offset))

        threads = [threading.Thread(target=appender, args=(log,)) for log in logs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for future in results:
            future.result(5)
    for log in logs:
        assert log.recovery_point == 30
    for log in logs[1:]:
        log.close()


def test_a_failed_sync_fails_its_waiters_and_the_next_one_retries(open_log):
    log = open_log()
    with GroupCommitter() as committer:
        faults.arm("log.flush.before_sync", OSError(errno.EIO, "injected"))
        info = log.append(make_batch(), now_ms=0)
        with pytest.raises(StorageError, match="injected|EIO"):
            committer.request(log, info.last_offset).result(5)
        assert log.recovery_point == 0
        assert committer.request(log, info.last_offset).result(5) == 1
        assert committer.statistics().failures == 1


def test_storage_errors_reach_the_waiters(open_log, monkeypatch):
    log = open_log()

    def failing(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with GroupCommitter() as committer:
        info = log.append(make_batch(), now_ms=0)
        with pytest.raises(StorageError, match="fdatasync .*EIO"):
            committer.request(log, info.last_offset).result(5)


def test_usable_from_asyncio(open_log):
    log = open_log()
    committer = GroupCommitter()

    async def produce():
        infos = [log.append(make_batch(), now_ms=0) for _ in range(10)]
        done = await asyncio.gather(
            *(asyncio.wrap_future(committer.request(log, i.last_offset)) for i in infos)
        )
        return done

    assert asyncio.run(produce()) == [10] * 10
    committer.close()
    with pytest.raises(RuntimeError, match="closed"):
        committer.request(log, 0)


@pytest.mark.parametrize("when", ["queued", "syncing"])
def test_a_waiter_that_gives_up_leaves_the_committer_serving(open_log, monkeypatch, when):
    """An asyncio waiter cancelled (its client went away mid-produce or mid-commit) cancels
    the request's future through wrap_future, before its round or while it syncs. The
    committer skips it and goes on: resolving it anyway raised InvalidStateError and killed
    the sync thread, so every later acks=all produce and offset commit of that worker waited
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

    async def give_up() -> None:
        busy = committer.request(log, log.append(make_batch(), now_ms=0).last_offset)
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
        if when == "syncing":  # the round that holds it is running
            request = busy
        else:  # it waits for the next round
            request = committer.request(log, log.append(make_batch(), now_ms=0).last_offset)
        waiter = asyncio.ensure_future(asyncio.wrap_future(request))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        gate.set()
        # queued: dropped; syncing: too late to cancel, it is resolved as the others
        assert request.cancelled() == (when == "queued")
        await asyncio.wrap_future(busy)

    try:
        asyncio.run(give_up())
        later = committer.request(log, log.append(make_batch(), now_ms=0).last_offset)
        assert later.result(5) == log.log_end_offset
    finally:
        gate.set()
        committer.close(5)


def test_close_serves_what_is_pending_and_closed_logs_fail(open_log):
    log = open_log()
    committer = GroupCommitter()
    info = log.append(make_batch(), now_ms=0)
    future = committer.request(log, info.last_offset)
    committer.close()
    assert future.result(0) == 1
    log.append(make_batch(), now_ms=0)
    log.close()
    with GroupCommitter() as committer:
        from appliance.segments import LogClosedError

        with pytest.raises(LogClosedError):
            committer.request(log, 5).result(5)


def test_request_on_loop_calls_back_on_the_loop_once_per_round(open_log, monkeypatch):
    log = open_log()
    gate = threading.Event()
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (gate.wait(5), real(fd)))
    wakeups = []

    async def produce(committer):
        loop = asyncio.get_running_loop()
        real_call = loop.call_soon_threadsafe
        monkeypatch.setattr(loop, "call_soon_threadsafe",
                            lambda *a: (wakeups.append(a), real_call(*a))[1])
        done = loop.create_future()
        seen = []

        def synced(outcome):
            seen.append((outcome, threading.get_ident()))
            if len(seen) == 10:
                done.set_result(None)

        first = log.append(make_batch(), now_ms=0)
        assert committer.request_on_loop(log, first.last_offset, loop, synced)
        await asyncio.sleep(0.2)  # the first round is in its fdatasync: the rest share one
        for _ in range(9):
            info = log.append(make_batch(), now_ms=0)
            assert committer.request_on_loop(log, info.last_offset, loop, synced)
        gate.set()
        await asyncio.wait_for(done, 10)
        assert not committer.request_on_loop(log, 3, loop, synced)  # durable already
        return seen

    with GroupCommitter() as committer:
        seen = asyncio.run(produce(committer))
        stats = committer.statistics()
    assert [outcome for outcome, _ in seen] == [1] + [10] * 9
    assert {thread for _, thread in seen} == {threading.get_ident()}
    assert len(wakeups) == 2  # one per round, not one per request
    assert (stats.requests, stats.immediate, stats.rounds, stats.syncs) == (11, 1, 2, 2)


def test_request_on_loop_hands_storage_errors_to_the_callback(open_log):
    log = open_log()

    async def produce(committer):
        loop = asyncio.get_running_loop()
        outcomes = []
        done = loop.create_future()

        def synced(outcome):
            outcomes.append(outcome)
            if not done.done():
                done.set_result(None)

        faults.arm("log.flush.before_sync", OSError(errno.EIO, "injected"))
        info = log.append(make_batch(), now_ms=0)
        committer.request_on_loop(log, info.last_offset, loop, synced)
        await asyncio.wait_for(done, 10)
        done = loop.create_future()
        committer.request_on_loop(log, info.last_offset, loop, synced)  # the next one retries
        await asyncio.wait_for(done, 10)
        return outcomes

    with GroupCommitter() as committer:
        first, second = asyncio.run(produce(committer))
    assert isinstance(first, StorageError) and "EIO" in str(first)
    assert second == 1 and log.recovery_point == 1


def test_a_failing_callback_keeps_the_others_of_its_round(open_log, caplog):
    log = open_log()

    async def produce(committer):
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        info = log.append(make_batch(), now_ms=0)
        committer.request_on_loop(log, info.last_offset, loop, lambda outcome: 1 / 0)
        committer.request_on_loop(log, info.last_offset, loop, done.set_result)
        return await asyncio.wait_for(done, 10)

    with GroupCommitter() as committer:
        assert asyncio.run(produce(committer)) == 1
    assert "a group commit callback failed" in caplog.text


def test_close_refuses_callbacks_too(open_log):
    log = open_log()
    committer = GroupCommitter()
    committer.close()
    committer.close()  # idempotent

    async def ask():
        committer.request_on_loop(log, 0, asyncio.get_running_loop(), print)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(ask())
