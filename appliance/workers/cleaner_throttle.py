"""The log cleaner's I/O throttle: ``log.cleaner.io.max.bytes.per.second`` (Kafka's Throttler).

The cleaner's thread reports every byte it reads or writes; when the rate over the current
window exceeds the limit, the thread sleeps until it does not. Only the cleaner's thread
sleeps: the event loop never calls it. Windows of a second keep one burst from being paid
for long after it ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

WINDOW_S = 1.0


class Throttler:
    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()  # threads cleaning at once share one budget, as Kafka's
        self._window_start = clock()
        self._bytes = 0
        self.slept_s = 0.0

    def __call__(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        with self._lock:
            self._bytes += nbytes
            elapsed = self._clock() - self._window_start
            wait = self._bytes / self.rate - elapsed
            if elapsed >= WINDOW_S and wait <= 0:
                self._window_start, self._bytes = self._clock(), 0
        if wait > 0:
            self.slept_s += wait
            self._sleep(wait)
