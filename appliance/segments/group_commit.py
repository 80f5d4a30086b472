"""Group commit: many durable appends share one fdatasync per dirty log.

A worker appends (fast: the bytes land in the page cache) and then asks the committer for
durability with :meth:`GroupCommitter.request`, getting a ``concurrent.futures.Future`` that
resolves once every offset up to the requested one is on disk. One background thread does the
syncing: while it runs an fdatasync, new requests pile up, and the next round serves all of
them with one ``flush_through`` per log. Under load the number of syncs per second stays near
what the disk can do, and each one acknowledges everything that arrived meanwhile.

From asyncio::

    await asyncio.wrap_future(committer.request(log, info.last_offset))

``wrap_future`` resolves the asyncio future on its loop thread-safely, so the committer needs
no event loop of its own. The produce path, which asks once per acks=all request, uses
:meth:`request_on_loop` instead: a callback run on the asking loop, with one
``call_soon_threadsafe`` per loop and log per round for all of that round's callbacks. A
``concurrent.futures.Future`` carries a Condition, and ``wrap_future`` adds an asyncio future,
two callbacks and a wake-up of the loop, per request; with the task and the ``gather`` around
them that was a quarter of a worker's instructions per acks=all request (issue 14, measured
with callgrind: 726k instructions per request before, 548k after). Requests reach the thread
through a ``SimpleQueue``, whose ``put`` wakes it in C, not through a Python ``Condition``.

Who may call what: :meth:`request`, :meth:`request_on_loop` and :meth:`statistics` from any
thread; :meth:`close` once, from the owner. A requester may cancel the future of
:meth:`request` until its round begins (an asyncio waiter that is cancelled does so through
``wrap_future``); the sync is made anyway. The committer calls only
:meth:`PartitionLog.flush_through` (thread-safe) and ``recovery_point`` on the logs it is
given. A failed sync fails exactly the waiters of that log in that round (with the
StorageError); later requests try again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("klog.segments")
_STOP = object()  # close(): the thread serves what was queued before it, then ends


@dataclass
class GroupCommitStatistics:
    requests: int = 0  # futures handed out
    immediate: int = 0  # already durable when asked: resolved without the thread
    rounds: int = 0  # wake-ups of the sync thread
    syncs: int = 0  # flush_through calls (one per dirty log per round)
    failures: int = 0  # flush_through calls that raised


class GroupCommitter:
    """One per worker. Start it, hand its :meth:`request` futures to appenders, close it last."""

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

    def request(self, log, offset: int) -> Future:
        """A future resolved (with the log's recovery point) once offsets <= ``offset`` of
        ``log`` are durable, or failed with the StorageError that prevented it. Raises
        RuntimeError after :meth:`close`."""
        future: Future = Future()
        if not self._wait(log, offset, future):
            future.set_result(log.recovery_point)
        return future

    def request_on_loop(self, log, offset: int, loop,
                        callback: Callable[[Any], None]) -> bool:
        """As :meth:`request`, but ``callback(outcome)`` runs on the asyncio ``loop`` once the
        offsets are durable; ``outcome`` is the recovery point, or the StorageError that
        prevented it. Returns False, and never calls back, when they already are durable.
        Raises RuntimeError after :meth:`close`."""
        return self._wait(log, offset, (loop, callback))

    def _wait(self, log, offset: int, waiter) -> bool:
        """Queue ``waiter`` for the next round; False if ``offset`` is durable already."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            self._stats.requests += 1
            if offset < log.recovery_point:
                self._stats.immediate += 1
                return False
            self._requests.put((log, offset, waiter))
        return True

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
            pending: dict[int, tuple[Any, int, list]] = {}  # id(log) -> (log, offset, waiters)
            stop = False
            while True:  # take every request queued meanwhile: one sync per log serves them
                if item is _STOP:
                    stop = True
                else:
                    plog, offset, waiter = item
                    entry = pending.get(id(plog))
                    if entry is None:
                        pending[id(plog)] = (plog, offset, [waiter])
                    else:
                        entry[2].append(waiter)
                        if offset > entry[1]:
                            pending[id(plog)] = (plog, offset, entry[2])
                try:
                    item = requests.get_nowait()
                except queue.Empty:
                    break
            if pending:
                with self._lock:
                    self._stats.rounds += 1
            for plog, offset, waiters in pending.values():
                # a future whose waiter gave up (asyncio's wrap_future passes its cancellation
                # on) is dropped; the others can no longer be cancelled, so settling them
                # cannot fail (an InvalidStateError here once killed this thread)
                waiters = [w for w in waiters
                           if not isinstance(w, Future) or w.set_running_or_notify_cancel()]
                self._answer(waiters, self._sync(plog, offset, len(waiters)))
            if stop:
                return

    @staticmethod
    def _answer(waiters: list, outcome) -> None:
        """Settle one log's waiters as soon as its sync is done: futures here, callbacks with
        one wake-up of each loop they wait on."""
        on_loops: dict[Any, list] = {}
        for waiter in waiters:
            if isinstance(waiter, Future):
                _settle(waiter, outcome)
            else:
                loop, callback = waiter
                calls = on_loops.get(loop)
                if calls is None:
                    calls = on_loops[loop] = []
                calls.append((callback, outcome))
        for loop, calls in on_loops.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: its waiters went with it
                loop.call_soon_threadsafe(_call_all, calls)

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


def _settle(future: Future, outcome) -> None:
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _call_all(calls: list) -> None:
    """On the loop: every callback of one round, each on its own (one failing is logged and
    keeps none of the others from running)."""
    for callback, outcome in calls:
        try:
            callback(outcome)
        except Exception:
            log.exception("a group commit callback failed")
