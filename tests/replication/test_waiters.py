"""Long-polling waits (appliance/workers/waiters.py): an append wakes every fetch waiting on
its partition; a high watermark that moved alone wakes consumers' fetches, not followers'."""

from __future__ import annotations

import asyncio

from appliance.workers.replication.waiters import AppendWaiters


def _woken(notify: str) -> tuple[bool, bool]:
    """(consumer woken, follower woken) by `waiters.<notify>("t", 0)`."""
    async def run():
        waiters = AppendWaiters()
        consumer = asyncio.ensure_future(waiters.wait([("t", 0)], 0.5))
        follower = asyncio.ensure_future(waiters.wait([("t", 0)], 0.5, replica=True))
        await asyncio.sleep(0)
        assert waiters.statistics() == {"partitions_waited_on": 1, "waiting_fetches": 2}
        getattr(waiters, notify)("t", 0)
        woken = await consumer, await follower
        assert waiters.statistics() == {"partitions_waited_on": 0, "waiting_fetches": 0}
        return woken
    return asyncio.run(run())


def test_an_append_wakes_consumers_and_followers():
    assert _woken("notify") == (True, True)


def test_a_high_watermark_that_moved_alone_wakes_consumers_only():
    assert _woken("notify_readers") == (True, False)
