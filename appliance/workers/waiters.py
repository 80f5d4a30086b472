"""Long polling: Fetch requests that wait for data are woken by appends to their partitions.

A waiting fetch registers one `asyncio.Event` under every partition it reads; an append sets
the events registered under its partition. The fetch then re-reads and decides whether it has
`min_bytes` yet. Nothing here polls on a timer, so a waiting fetch answers within one loop
iteration of the append that completes it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class AppendWaiters:
    """Events of waiting fetches, keyed by (topic, partition). Used from the event loop only."""

    def __init__(self):
        self._waiting: dict[tuple[str, int], set[asyncio.Event]] = defaultdict(set)

    def notify(self, topic: str, index: int) -> None:
        events = self._waiting.pop((topic, index), None)
        if events:
            for event in events:
                event.set()

    async def wait(self, partitions, timeout_s: float) -> bool:
        """Wait until one of `partitions` is appended to, or the timeout; True if woken."""
        event = asyncio.Event()
        keys = list(partitions)
        for key in keys:
            self._waiting[key].add(event)
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiting[key]

    def waiting_partitions(self) -> list[tuple[str, int]]:
        """The partitions some fetch waits on now."""
        return list(self._waiting)

    def statistics(self) -> dict[str, int]:
        return {"partitions_waited_on": len(self._waiting),
                "waiting_fetches": len({e for s in self._waiting.values() for e in s})}
