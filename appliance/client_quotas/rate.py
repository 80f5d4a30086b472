"""Kafka's sampled rate (org.apache.kafka.common.metrics.stats.Rate over a SampledStat), the
measure every client quota is checked against.

`quota.window.num` samples of `quota.window.size.seconds` each: a value goes into the current
sample, a new sample starts when the current one is a window old (reusing the oldest slot),
and samples older than all the windows together are reset before a measure. The rate is the
samples' sum over the time since the oldest sample began, but never over less than
`num - 1` whole windows, so a client's first bytes are not measured over a few milliseconds.
The throttle time is Kafka's: how long the client must stay silent for the measured rate to
come back to the bound, at most one window (`QuotaUtils.boundedThrottleTime`).
"""

from __future__ import annotations


class SampledRate:
    __slots__ = ("num", "window_ms", "_starts", "_values", "_current")

    def __init__(self, num: int, window_ms: int):
        self.num = max(2, num)
        self.window_ms = max(1, window_ms)
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
            self._current = 0
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.num
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def _purge(self, now_ms: float) -> None:
        expiry = self.num * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expiry:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """Kafka's Rate.windowSize: time since the oldest sample, padded to num - 1 windows."""
        elapsed = now_ms - min(self._starts) if self._starts else 0.0
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """The rate per second now."""
        self._purge(now_ms)
        return sum(self._values) * 1000.0 / self.window_size_ms(now_ms)

    def throttle_ms(self, bound: float, now_ms: float) -> int:
        """0 within the bound; else Kafka's throttle time, at most one window."""
        rate = self.measure(now_ms)
        if rate <= bound:
            return 0
        if bound <= 0:
            return self.window_ms
        excess_ms = (rate - bound) / bound * self.window_size_ms(now_ms)
        return int(min(round(excess_ms), self.window_ms))
