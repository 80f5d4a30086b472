"""Group commit: many durable appends share one fdatasync per dirty log.

A worker appends (fast: the bytes land in the page cache) and then asks the committer for
durability, on its event loop::

    synced = committer.durable(log, info.last_offset)
    if synced is not None:  # None: durable already
        await synced        # the new recovery point, or the StorageError of the failed sync

One background thread does the syncing: while it runs an fdatasync, new requests pile up, and
the next round serves all of them with one ``flush_through`` per log. Under load the number of
syncs per second stays near what the disk can do, and each one acknowledges everything that
arrived meanwhile.

Many logs in one round (a producer writing a batch to each of thousands of partitions with
acks=all): each fdatasync costs 0.1-0.2 ms here (a journal commit and a flush of the disk's
cache), thousands of them a round. From FILESYSTEM_SYNC_LOGS logs of one filesystem on, the
round makes them durable with one syncfs of it (filesystems.py), which writes back every
dirty page of that filesystem and waits for it: each log is then durable up to the end it had
before the syncfs began (`PartitionLog.unsynced_end`, `synced_through`). It stands for an
fdatasync of each only because, since Linux 5.8, it reports a writeback error of any file of
the filesystem that came after its descriptor was opened: the committer opens one descriptor
per filesystem of its `log_dirs` when it starts, before any append it must answer for, and
uses no syncfs without them. A syncfs that fails (it does not say which file) sends every log
of it to its own sync, and that filesystem's logs to fdatasync from then on; a log whose end
was cut meanwhile syncs on its own too.

Why one way to wait, and this one: the waiter is an asyncio future of the asking loop, and
the thread settles all of one round's futures of one log and loop with ONE
``call_soon_threadsafe``. The committer once also handed out ``concurrent.futures.Future``s
for ``asyncio.wrap_future``: each carries a Condition, and ``wrap_future`` adds an asyncio
future, two callbacks and a wake-up of the loop, per request; with the task and the
``gather`` around them that was a quarter of a worker's instructions per acks=all request
(issue 14, measured with callgrind: 726k instructions per request before, 548k after with
one wake-up per round). Two ways to wait for the same fdatasync were one too many. Requests
reach the thread through a ``SimpleQueue``, whose ``put`` wakes it in C, not through a Python
``Condition``.

Who may call what: :meth:`durable` from a running event loop (any loop: each round wakes
each asking loop once), :meth:`statistics` from any thread, :meth:`close` once, from the
owner. A waiter may cancel its future at any time; the sync is made anyway and the thread
leaves a settled future alone (settling a cancelled one once raised InvalidStateError and
killed the thread). The committer calls only :meth:`PartitionLog.flush_through`
(thread-safe) and ``recovery_point`` on the logs it is given. A failed sync fails exactly
the waiters of that log in that round (with the StorageError); later requests try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from appliance.segments import faults, filesystems

log = logging.getLogger("klog.segments")
_STOP = object()  # close(): the thread serves what was queued before it, then ends
# A round that asks this many logs of one filesystem to be durable syncs the filesystem once
# (syncfs) instead of each log: an fdatasync costs 0.1-0.2 ms here, and a producer writing to
# thousands of partitions with acks=all asks for thousands a round. Not fewer: a syncfs also
# writes back whatever else of that filesystem is dirty, and waits for it.
FILESYSTEM_SYNC_LOGS = 64


@dataclass
class GroupCommitStatistics:
    requests: int = 0  # durable() calls
    immediate: int = 0  # already durable when asked: None returned, nothing queued
    rounds: int = 0  # wake-ups of the sync thread
    syncs: int = 0  # flush_through calls (one per dirty log per round)
    failures: int = 0  # flush_through calls that raised
    filesystem_syncs: int = 0  # syncfs calls, each for many logs of one filesystem (in syncs)


class GroupCommitter:
    """One per worker. Start it, let appenders await :meth:`durable`, close it last."""

    def __init__(self, *, name: str = "klog-group-commit", on_sync=None,
                 log_dirs: Iterable[str] = ()):
        """`on_sync(waiters, seconds, failed)`, if given, hears of every sync from the
        committer's thread (the worker's metrics; it must be quick and must not raise).
        `log_dirs`: the directories of the logs it will be given, whose filesystems a round
        of many logs may sync whole; their descriptors are opened now, before any append
        they must answer for (module docstring). Raises OSError."""
        self._on_sync = on_sync
        self._filesystems: dict[int, tuple[int, str]] = {}  # st_dev -> (descriptor, path)
        for path in log_dirs if filesystems.REPORTS_ERRORS else ():
            device = os.stat(path).st_dev
            if device not in self._filesystems:
                self._filesystems[device] = (os.open(path, os.O_RDONLY | os.O_DIRECTORY), path)
        # The lock only makes "not closed" and the put one step, so nothing can be queued
        # behind the stop sentinel (which the thread would never serve).
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._stats = GroupCommitStatistics()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def durable(self, log, offset: int) -> asyncio.Future | None:
        """Wait until offsets <= ``offset`` of ``log`` are on disk. None when they already
        are (``offset`` below the log's recovery point); otherwise a future of the running
        loop, resolved with the log's new recovery point, or failed with the StorageError
        (LogClosedError for a closed log) that kept this round's sync of ``log`` from
        succeeding. Call it on a running event loop (RuntimeError otherwise); raises
        RuntimeError after :meth:`close`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            self._stats.requests += 1
            if offset < log.recovery_point:
                self._stats.immediate += 1
                return None
            future = loop.create_future()
            self._requests.put((log, offset, loop, future))
        return future

    def statistics(self) -> GroupCommitStatistics:
        with self._lock:
            return GroupCommitStatistics(**vars(self._stats))

    def close(self, timeout: float | None = None) -> None:
        """Serve what is pending, then stop the thread. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._requests.put(_STOP)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            for fd, _ in self._filesystems.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._filesystems.clear()

    def __enter__(self) -> GroupCommitter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self) -> None:
        requests = self._requests
        while True:
            item = requests.get()  # sleeps until the first request of the next round
            # id(log) -> (log, highest offset asked, {loop: [futures]})
            pending: dict[int, tuple[Any, int, dict]] = {}
            stop = False
            while True:  # take every request queued meanwhile: one sync per log serves them
                if item is _STOP:
                    stop = True
                else:
                    plog, offset, loop, future = item
                    entry = pending.get(id(plog))
                    if entry is None:
                        pending[id(plog)] = (plog, offset, {loop: [future]})
                    else:
                        entry[2].setdefault(loop, []).append(future)
                        if offset > entry[1]:
                            pending[id(plog)] = (plog, offset, entry[2])
                try:
                    item = requests.get_nowait()
                except queue.Empty:
                    break
            if pending:
                with self._lock:
                    self._stats.rounds += 1
            outcomes = self._sync_round(list(pending.values()))
            for (_, _, on_loops), outcome in zip(pending.values(), outcomes, strict=True):
                for loop, futures in on_loops.items():  # one wake-up of each loop
                    with contextlib.suppress(RuntimeError):  # closed: its waiters went with it
                        loop.call_soon_threadsafe(_settle_all, futures, outcome)
            if stop:
                return

    def _sync_round(self, entries: list) -> list:
        """Each entry's outcome (`_sync`'s). The logs of one filesystem that are at least
        FILESYSTEM_SYNC_LOGS in this round are made durable by one syncfs of it; a log whose
        end was cut meanwhile, or every one of them when the syncfs fails, is synced on its
        own, which also tells which log an error belongs to."""
        outcomes: list = [None] * len(entries)
        if self._filesystems and len(entries) >= FILESYSTEM_SYNC_LOGS:
            by_device: dict[int, list[int]] = {}
            for i, (plog, _, _) in enumerate(entries):
                with contextlib.suppress(OSError):  # its directory is gone: its own sync says
                    by_device.setdefault(plog.device, []).append(i)
            for device, members in by_device.items():
                if len(members) >= FILESYSTEM_SYNC_LOGS and device in self._filesystems:
                    self._sync_filesystem(device, entries, members, outcomes)
        for i, (plog, offset, on_loops) in enumerate(entries):
            if outcomes[i] is None:
                outcomes[i] = self._sync(plog, offset, _count(on_loops))
        return outcomes

    def _sync_filesystem(self, device: int, entries: list, members: list[int],
                         outcomes: list) -> None:
        """One syncfs for the logs `members` (indices into `entries`) of filesystem
        `device`: each one's new recovery point into `outcomes`, or None left for those to
        sync on their own. A failed syncfs leaves them all to that, and this filesystem's
        logs are synced one by one from then on: the error was reported to this descriptor
        once, and a later syncfs would not report it again, while each log's own fdatasync
        still reports what concerns its file."""
        fd, path = self._filesystems[device]
        logs = [entries[i][0] for i in members]
        unsynced = [plog.unsynced_end() for plog in logs]
        waiters = sum(_count(entries[i][2]) for i in members)
        began = time.monotonic()
        try:
            faults.point("log.flush.before_sync")
            filesystems.syncfs(fd, path)
        except OSError as exc:
            log.error("syncfs of %s failed (%s): its logs are synced one by one from now on",
                      path, exc)
            del self._filesystems[device]
            with contextlib.suppress(OSError):
                os.close(fd)
            if self._on_sync is not None:
                self._on_sync(waiters, time.monotonic() - began, True)
            return
        if self._on_sync is not None:
            self._on_sync(waiters, time.monotonic() - began, False)
        with self._lock:
            self._stats.syncs += 1
            self._stats.filesystem_syncs += 1
        for i, plog, ends in zip(members, logs, unsynced, strict=True):
            try:
                outcomes[i] = plog.recovery_point if ends is None else plog.synced_through(ends)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiters, never lost
                outcomes[i] = exc

    def _sync(self, plog, offset: int, waiters: int):
        """One log's fdatasync: the new recovery point, or the exception that prevented it."""
        began = time.monotonic()
        try:
            durable = plog.flush_through(offset)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiters, never lost
            if self._on_sync is not None:
                self._on_sync(waiters, time.monotonic() - began, True)
            with self._lock:
                self._stats.syncs += 1
                self._stats.failures += 1
            return exc
        if self._on_sync is not None:
            self._on_sync(waiters, time.monotonic() - began, False)
        with self._lock:
            self._stats.syncs += 1
        return durable


def _count(on_loops: dict) -> int:
    return sum(len(futures) for futures in on_loops.values())


def _settle_all(futures: list, outcome) -> None:
    """On the waiters' loop: settle one round's futures of one log. A future its waiter
    cancelled meanwhile is left alone (settling it would raise InvalidStateError)."""
    if isinstance(outcome, BaseException):
        for future in futures:
            if not future.done():
                future.set_exception(outcome)
    else:
        for future in futures:
            if not future.done():
                future.set_result(outcome)
