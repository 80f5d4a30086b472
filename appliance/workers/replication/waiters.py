"""Long polling: Fetch requests that wait for data are woken by appends to their partitions.

A waiting fetch registers one `asyncio.Event` under every partition it reads; an append sets
the events registered under its partition. The fetch then re-reads and decides whether it has
`min_bytes` yet. Nothing here polls on a timer, so a waiting fetch answers within one loop
iteration of the append that completes it.

Consumers read up to the high watermark, followers up to the log end, so a leader whose high
watermark moves without an append (a follower's fetch moved it) wakes only consumers'
fetches (`notify_readers`): waking the followers' too would have each of them read again
for nothing, on every acks=all write. Followers learn the new high watermark with their
next answer, as Kafka's do.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class AppendWaiters:
    """Events of waiting fetches, keyed by (topic, partition). Used from the event loop only."""

    def __init__(self):
        self._waiting: dict[tuple[str, int], set[asyncio.Event]] = defaultdict(set)
        self._replicas: dict[tuple[str, int], set[asyncio.Event]] = defaultdict(set)
        # set whenever a consumer's fetch starts to wait: the poll of other workers'
        # partitions (worker.py) sleeps on it while no reader waits, instead of a timer
        self.readers_arrived = asyncio.Event()
        # moves whenever the consumers' waits change (a wait begins, ends or is woken): the
        # same number means the same partitions waited on, so the poll need not list them
        self.readers_changes = 0

    def notify(self, topic: str, index: int) -> None:
        """The log grew (or changed): every fetch waiting on it reads again."""
        for table in (self._waiting, self._replicas):
            events = table.pop((topic, index), None)
            if events:
                for event in events:
                    event.set()
                if table is self._waiting:
                    self.readers_changes += 1

    def notify_readers(self, topic: str, index: int) -> None:
        """Only the high watermark moved: consumers' fetches read again, followers' wait on."""
        events = self._waiting.pop((topic, index), None)
        if events:
            for event in events:
                event.set()
            self.readers_changes += 1

    async def wait(self, partitions, timeout_s: float, *, replica: bool = False) -> bool:
        """Wait until one of `partitions` is appended to, or the timeout; True if woken.
        `replica`: a follower's fetch (not woken by `notify_readers`)."""
        keys = list(partitions)
        return await self.wait_registered(self.register(keys, replica=replica), keys,
                                          timeout_s, replica=replica)

    def register(self, keys: list, *, replica: bool = False) -> asyncio.Event:
        """Register a waiter now, in the caller's step: an append from here on sets it (a
        fetch that has just read its partitions, and will await later, misses none)."""
        table = self._replicas if replica else self._waiting
        event = asyncio.Event()
        for key in keys:
            table[key].add(event)
        if not replica and keys:
            self.readers_arrived.set()
            self.readers_changes += 1
        return event

    async def wait_registered(self, event: asyncio.Event, keys: list, timeout_s: float, *,
                              replica: bool = False) -> bool:
        """`wait`, for a waiter `register` gave (always unregistered when this ends)."""
        try:
            if not event.is_set():
                await asyncio.wait_for(event.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.unregister(event, keys, replica=replica)

    def unregister(self, event: asyncio.Event, keys: list, *, replica: bool = False) -> None:
        """Forget a waiter `register` gave (again: harmless)."""
        table = self._replicas if replica else self._waiting
        if not replica and keys:
            self.readers_changes += 1
        for key in keys:
            waiting = table.get(key)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del table[key]

    def waiting_partitions(self) -> list[tuple[str, int]]:
        """The partitions some fetch waits on now."""
        return list(self._waiting.keys() | self._replicas.keys())

    def readers_waiting(self) -> list[tuple[str, int]]:
        """The partitions some consumer's fetch waits on now (a follower's fetch waits only
        on partitions led by this worker, whose appends wake it directly)."""
        return list(self._waiting)

    def statistics(self) -> dict[str, int]:
        tables = (self._waiting, self._replicas)
        return {"partitions_waited_on": len(self.waiting_partitions()),
                "waiting_fetches": len({e for t in tables for s in t.values() for e in s})}
