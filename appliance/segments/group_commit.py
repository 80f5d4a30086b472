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
no event loop of its own.

Who may call what: :meth:`request` and :meth:`statistics` from any thread; :meth:`close` once,
from the owner. A requester may cancel its future until its round begins (an asyncio waiter
that is cancelled does so through ``wrap_future``); the sync is made anyway. The committer
calls only :meth:`PartitionLog.flush_through` (thread-safe) and ``recovery_point`` on the
logs it is given. A failed sync fails exactly the futures of that log
in that round (with the StorageError); later requests try again.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass


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
        self._pending: dict[int, tuple[object, int, list[Future]]] = {}  # id(log) -> ...
        self._cond = threading.Condition()
        self._closed = False
        self._stats = GroupCommitStatistics()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def request(self, log, offset: int) -> Future:
        """A future resolved (with the log's recovery point) once offsets <= ``offset`` of
        ``log`` are durable, or failed with the StorageError that prevented it. Raises
        RuntimeError after :meth:`close`."""
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            self._stats.requests += 1
            if offset < log.recovery_point:
                self._stats.immediate += 1
                future.set_result(log.recovery_point)
                return future
            entry = self._pending.get(id(log))
            if entry is None:
                self._pending[id(log)] = (log, offset, [future])
            else:
                entry[2].append(future)
                if offset > entry[1]:
                    self._pending[id(log)] = (log, offset, entry[2])
            self._cond.notify()
        return future

    def statistics(self) -> GroupCommitStatistics:
        with self._cond:
            return GroupCommitStatistics(**vars(self._stats))

    def close(self, timeout: float | None = None) -> None:
        """Serve what is pending, then stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def __enter__(self) -> GroupCommitter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._stats.rounds += 1
            for log, offset, futures in batch.values():
                self._sync(log, offset, futures)

    def _sync(self, log, offset: int, futures: list[Future]) -> None:
        # a waiter that gave up (asyncio's wrap_future passes its cancellation on) is
        # dropped; the others can no longer be cancelled, so resolving them cannot fail
        futures = [f for f in futures if f.set_running_or_notify_cancel()]
        began = time.monotonic()
        try:
            durable = log.flush_through(offset)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiters, never lost
            if self._on_sync is not None:
                self._on_sync(len(futures), time.monotonic() - began, True)
            with self._cond:
                self._stats.syncs += 1
                self._stats.failures += 1
            for future in futures:
                future.set_exception(exc)
            return
        if self._on_sync is not None:
            self._on_sync(len(futures), time.monotonic() - began, False)
        with self._cond:
            self._stats.syncs += 1
        for future in futures:
            future.set_result(durable)
