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
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("klog.segments")
_STOP = object()  # close(): the thread serves what was queued before it, then ends


@dataclass
class GroupCommitStatistics:
    requests: int = 0  # durable() calls
    immediate: int = 0  # already durable when asked: None returned, nothing queued
    rounds: int = 0  # wake-ups of the sync thread
    syncs: int = 0  # flush_through calls (one per dirty log per round)
    failures: int = 0  # flush_through calls that raised


class GroupCommitter:
    """One per worker. Start it, let appenders await :meth:`durable`, close it last."""

    def __init__(self, *, name: str = "klog-group-commit", on_sync=None):
        """`on_sync(waiters, seconds, failed)`, if given, hears of every sync from the
        committer's thread (the worker's metrics; it must be quick and must not raise)."""
        self._on_sync = on_sync
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
            for plog, offset, on_loops in pending.values():
                waiters = sum(len(futures) for futures in on_loops.values())
                outcome = self._sync(plog, offset, waiters)
                for loop, futures in on_loops.items():  # one wake-up of each loop
                    with contextlib.suppress(RuntimeError):  # closed: its waiters went with it
                        loop.call_soon_threadsafe(_settle_all, futures, outcome)
            if stop:
                return

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
