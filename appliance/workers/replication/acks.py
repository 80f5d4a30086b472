"""acks=all appends of one partition waiting for its high watermark to pass them.

Each waits on an asyncio future resolved with an `ErrorCode`: NONE once the high watermark
passes its last offset (NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR had shrunk below
`min.insync.replicas` meanwhile: kept, but not as durable as asked), the error that ended the
leadership (NOT_LEADER_OR_FOLLOWER), or REQUEST_TIMED_OUT after the request's timeout. A
timer per waiter, not a task: the produce path pays one future and one timer handle.

Event loop only.
"""

from __future__ import annotations

import asyncio

from klog.protocol.error_codes import ErrorCode


class AcksWaiters:
    def __init__(self):
        self._waiting: list[tuple[int, asyncio.Future, asyncio.TimerHandle]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, last_offset: int, future: asyncio.Future, timeout_s: float) -> None:
        """Resolve `future` once the high watermark passes `last_offset` (see `release`)."""
        loop = future.get_loop()
        timer = loop.call_later(max(timeout_s, 0.0), _settle, future,
                                ErrorCode.REQUEST_TIMED_OUT)
        self._waiting.append((last_offset, future, timer))

    def release(self, high_watermark: int, answer: ErrorCode) -> None:
        """Answer `answer` to every waiter whose last offset is below `high_watermark`."""
        if not self._waiting:
            return
        keep = []
        for entry in self._waiting:
            offset, future, timer = entry
            if future.done():
                timer.cancel()
            elif offset < high_watermark:
                timer.cancel()
                future.set_result(answer)
            else:
                keep.append(entry)
        self._waiting = keep

    def fail(self, error: ErrorCode) -> None:
        """Answer every waiter `error` (the leadership ended)."""
        waiting, self._waiting = self._waiting, []
        for _, future, timer in waiting:
            timer.cancel()
            _settle(future, error)


def _settle(future: asyncio.Future, error: ErrorCode) -> None:
    if not future.done():
        future.set_result(error)
