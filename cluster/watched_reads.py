"""Reads of znodes under ZooKeeper watches, kept until their watch fires: a fleet pass asks
ZooKeeper only for what changed since the last pass.

Why: a full re-read of the fleet costs one request per znode (every partition's state), and
kazoo spends ~0.1-0.3 ms of Python per request on its one connection thread; a few hundred
partitions made each pass 60 ms to seconds on a loaded host, after every watch that fired,
which is what a leadership change waits for on every appliance.

Rules that keep a cached value as good as a fresh read:
- a value is cached only under the watch its own read armed (`get` with a watch, `exists`
  for a missing node, `get_children` with a child watch): ZooKeeper sends that watch's event
  before any later read could see the change, so until the event arrives the value is the
  node's current one, as much as a value read a moment ago is;
- an event drops the cached values of its path (data and children: kazoo fires one event per
  path and type) and bumps the path's generation; a read's result is stored only if neither
  its path's generation nor the cache's epoch moved while it was in flight, so a value an
  event overtook is used for that pass only and read again on the next;
- kazoo hands watch events to a callback thread, so a read's response can overtake the
  callback of an event that came before it (our own write's, say): `catch_up`, at the start
  of each pass, waits for the callbacks queued so far, so a pass sees at least everything
  that preceded the last response we had (read-your-writes, as a direct read gives);
- every connection-state change (SUSPENDED, LOST, CONNECTED: a new session has none of the
  old watches, and a reconnected one may have missed what changed meanwhile), an event
  without a path (kazoo's watch reset), and `invalidate` drop everything: the next pass
  reads every node again;
- as a safety net under the watches, each value is also forgotten some time after it was
  read (`expire`, with `refresh_s`): between half and all of `refresh_s`, drawn per value,
  so that the re-reads of a large fleet spread over passes. A full re-read at once, every
  minute, was 10,000 reads with 10,000 partitions: 9 s of the member's thread on a loaded
  host, during which it could not take over as controller (issue 26).

Partition states are the exception (`get_noted`): 10,000 of them all change when an
appliance dies, and kazoo hands one watch event at a time to Python on its one connection
thread, a few thousand a second: with a data watch on every state, the news of the new
leaders queued behind 10,000 events (issue 26). Every write of a state carries a note of
it in the same transaction (`state_changes.py`), so a present state is read without a watch
and kept until a note names it (`note`: the note's value replaces it if the note is the
later write, by zxid), its owner forgets it (`forget`: one older than its topic), or it
expires; a
missing one is watched for its creation as before. An appliance that may have missed a
note (it fell more than `state_changes.KEEP` notes behind) forgets everything. While an
appliance from before the notes is live (a rolling upgrade: its writes have none), states
are read with `get_many` again, which reads a value kept without a watch again, under one.

Thread rules: `on_event` runs on kazoo's callback thread, `invalidate` on any thread; `get_many`
and `children` on the owner's thread (one pass at a time). Raises what `Session` raises
(ZooKeeperUnavailable, NoNodeError from `children`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster.session import NoNodeError, Session

_UNKNOWN = object()
CATCH_UP_S = 2.0


@dataclass(frozen=True)
class NotedStat:
    """What a note tells of a state's znode: the fields of ZnodeStat the fleet view reads."""

    version: int
    mzxid: int


class WatchedReads:
    def __init__(self, session: Session, wake: Callable[[], None] = lambda: None, *,
                 refresh_s: float | None = None, clock=time.monotonic):
        """`wake`: called after every event (the owner runs a pass soon). `refresh_s`: each
        value is read again within this long (module docstring), None: only on events."""
        self.session = session
        self.wake = wake
        self.refresh_s = refresh_s
        self.clock = clock
        self._lock = threading.Lock()
        self._data: dict[str, tuple | None] = {}  # path -> (data, stat), None: missing
        self._children: dict[str, list[str]] = {}
        self._expiry: dict[str, float] = {}  # path -> when its cached values are forgotten
        self._generations: dict[str, int] = {}
        self._unwatched: set[str] = set()  # present values kept without a data watch
        self._epoch = 0
        self.requests = 0  # reads sent to ZooKeeper (statistics, tests)

    def on_event(self, event) -> None:
        """kazoo's watch callback: forget what the event's path held, then wake the owner."""
        path = getattr(event, "path", None)
        with self._lock:
            if path is None:
                self._forget_all()
            else:
                self._data.pop(path, None)
                self._children.pop(path, None)
                self._generations[path] = self._generations.get(path, 0) + 1
        self.wake()

    def catch_up(self, timeout_s: float = CATCH_UP_S) -> None:
        """Apply the watch events kazoo has received so far (module docstring); if its
        callback thread does not get to them in time, forget everything instead."""
        if not self.session.drain_callbacks(timeout_s):
            self.invalidate()

    def invalidate(self) -> None:
        """Forget every value: the next reads go to ZooKeeper."""
        with self._lock:
            self._forget_all()

    def _forget_all(self) -> None:
        self._epoch += 1
        self._data.clear()
        self._children.clear()
        self._expiry.clear()
        self._generations.clear()
        self._unwatched.clear()

    def expire(self) -> int:
        """Forget the values whose time has come (module docstring); how many paths. Called
        by the owner between passes (no read in flight)."""
        if self.refresh_s is None:
            return 0
        now = self.clock()
        with self._lock:
            due = [path for path, at in self._expiry.items() if at <= now]
            for path in due:
                del self._expiry[path]
                self._data.pop(path, None)
                self._children.pop(path, None)
        return len(due)

    def _cached(self, path: str) -> None:
        """Note when a value just stored is to be read again (under the lock)."""
        if self.refresh_s is not None and path not in self._expiry:
            self._expiry[path] = self.clock() + self.refresh_s * (0.5 + random.random() / 2)

    def _token(self, path: str) -> tuple[int, int]:
        return self._epoch, self._generations.get(path, 0)

    def get_many(self, paths: list[str], *, noted: bool = False) -> list[tuple | None]:
        """`(data, stat)` per path, None for a missing node; cached ones without a request."""
        with self._lock:
            if noted or not self._unwatched:
                out = [self._data.get(path, _UNKNOWN) for path in paths]
            else:  # one kept without a watch is read again, under one
                out = [_UNKNOWN if path in self._unwatched else self._data.get(path, _UNKNOWN)
                       for path in paths]
            wanted = [i for i, got in enumerate(out) if got is _UNKNOWN]
            tokens = [self._token(paths[i]) for i in wanted]
        if not wanted:
            return out
        self.requests += len(wanted)
        fresh = self.session.get_many([paths[i] for i in wanted],
                                      None if noted else self.on_event,
                                      missing_watch=self.on_event)
        with self._lock:
            for i, token, got in zip(wanted, tokens, fresh):
                out[i] = got
                if self._token(paths[i]) == token:
                    self._data[paths[i]] = got
                    self._cached(paths[i])
                    if noted and got is not None:
                        self._unwatched.add(paths[i])
                    else:
                        self._unwatched.discard(paths[i])
        return out

    def get_noted(self, paths: list[str]) -> list[tuple | None]:
        """`get_many` for znodes whose every write comes with a note (module docstring):
        a present one is read without a watch; a missing one is watched for its creation."""
        return self.get_many(paths, noted=True)

    def note(self, entries) -> None:
        """`(path, data, version, zxid)` of noted writes: each replaces the cached value
        unless that one is a later write (a read after the note's zxid)."""
        with self._lock:
            for path, data, version, zxid in entries:
                held = self._data.get(path)
                if held is not None and held[1].mzxid >= zxid:
                    continue
                self._data[path] = (data, NotedStat(version, zxid))
                self._unwatched.add(path)
                self._generations[path] = self._generations.get(path, 0) + 1
                self._cached(path)

    def forget(self, paths) -> None:
        """Read these again at their next read (a state kept from a deleted topic)."""
        with self._lock:
            for path in paths:
                self._data.pop(path, None)
                self._generations[path] = self._generations.get(path, 0) + 1

    def children(self, path: str) -> list[str]:
        """The children of `path` (NoNodeError if it is missing: nothing is cached then)."""
        with self._lock:
            found = self._children.get(path)
            token = self._token(path)
        if found is not None:
            return list(found)
        self.requests += 1
        found = self.session.call("get_children", path, watch=self.on_event)
        with self._lock:
            if self._token(path) == token:
                self._children[path] = list(found)
                self._cached(path)
        return list(found)


class DirectReads:
    """The same interface over plain reads (watches optional): a fresh read of everything."""

    def __init__(self, session: Session, watch=None):
        self.session = session
        self.watch = watch

    def get_many(self, paths: list[str]) -> list[tuple | None]:
        return self.session.get_many(paths, self.watch)

    def get_noted(self, paths: list[str]) -> list[tuple | None]:
        return self.session.get_many(paths, self.watch)

    def forget(self, paths) -> None:
        """Nothing is kept."""

    def children(self, path: str) -> list[str]:
        return self.session.call("get_children", path, watch=self.watch)


__all__ = ["DirectReads", "NoNodeError", "NotedStat", "WatchedReads"]
