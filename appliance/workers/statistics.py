"""A worker's statistics: plain counters and histograms the hot paths add to, and the document
that `MetricsPublisher` writes into the worker's shm metrics area for the supervisor's scrape.

Metrics stay out of logic: a connection calls `request_done` once per answered request (two
dict lookups and a bisect), the group committer calls `group_commit_synced` once per sync, a
leader calls `isr_changed` once per ISR change written, and everything else is read from
objects that count anyway (the connection guard, the lag report, the leaders' books of their
followers). Nothing here allocates per request beyond the first request of an (api, version).
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left

from appliance.shm.metrics_area import BATCH_BUCKETS, LATENCY_BUCKETS_S, DocumentTooLargeError

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.5
# the leaders' books of their followers' lags are walked this often, not at every publish:
# one entry per follower of every partition led, and at 10,000 partitions (a fleet of three,
# 1,667 led per worker) that walk was a sixth of an idle worker's CPU twice a second
FOLLOWER_LAGS_INTERVAL_S = 5.0
LOOP_LAG_PROBE_S = 0.1
PRODUCE_KEY = 0
ACKS_LABEL = {0: "0", 1: "1", -1: "all"}


class Histogram:
    """Cumulative-on-read bucket counts (one slot per upper bound, plus +Inf), count and sum."""

    __slots__ = ("bounds", "counts", "count", "sum")

    def __init__(self, bounds):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def export(self) -> list:
        return [self.counts, self.count, self.sum]


class WorkerStatistics:
    """Everything one worker counts for the metrics, besides what shm already holds."""

    def __init__(self, *, enabled: bool = True):
        """Disabled (no metrics.port), requests are not counted at all: the appliance then
        costs exactly what it did before metrics existed (the lag report is still published
        for `klog status`)."""
        self.enabled = enabled
        if not enabled:
            self.request_done = _ignore
        self.requests: dict[tuple[int, int], list[int]] = {}  # (api, version) -> [n, errors]
        self.latency: dict[tuple[str, str], Histogram] = {}  # (api name, acks) -> histogram
        self.loop_lag_s = 0.0
        self.sync_batches = Histogram(BATCH_BUCKETS)
        self.sync_seconds = Histogram(LATENCY_BUCKETS_S)
        self.sync_failures = 0
        self.isr_shrinks = 0  # ISR changes this worker's leaders asked for and got written
        self.isr_expands = 0
        self.authentications = [0, 0]  # SASL: [succeeded, failed], counted even when disabled

    def request_done(self, request, seconds: float, failed: bool) -> None:
        """One request answered (or dropped) after `seconds`; `failed`: a request-level error."""
        header = request.header
        key = (header.api_key, header.api_version)
        counts = self.requests.get(key)
        if counts is None:
            counts = self.requests[key] = [0, 0]
        counts[0] += 1
        if failed:
            counts[1] += 1
        acks = ""
        if header.api_key == PRODUCE_KEY and request.body is not None:
            acks = ACKS_LABEL.get(request.body.acks, str(request.body.acks))
        name = request.spec.name if request.spec is not None else str(header.api_key)
        histogram = self.latency.get((name, acks))
        if histogram is None:
            histogram = self.latency[(name, acks)] = Histogram(LATENCY_BUCKETS_S)
        histogram.observe(seconds)

    def group_commit_synced(self, waiters: int, seconds: float, failed: bool) -> None:
        """The group committer's hook: one fdatasync round for `waiters` appends (its thread)."""
        self.sync_batches.observe(waiters)
        self.sync_seconds.observe(seconds)
        if failed:
            self.sync_failures += 1

    def authentication_done(self, succeeded: bool) -> None:
        """One SASL authentication finished (a failure is counted when it is decided)."""
        self.authentications[0 if succeeded else 1] += 1

    def isr_changed(self, before: int, after: int) -> None:
        """A leader's ISR change was written: from `before` replicas in sync to `after`."""
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def document(self, connections, lag_report: dict | None,
                 followers: list | None = None) -> dict:
        return {
            "requests": [[api, version, n, errors]
                         for (api, version), (n, errors) in list(self.requests.items())],
            "latency": [[api, acks, *h.export()] for (api, acks), h in list(self.latency.items())],
            "connections": {"opened": connections.opened, "closed": connections.closed,
                            "refused": connections.refused,
                            "idle_closed": connections.idle_closed, "open": connections.open},
            "loop_lag_s": self.loop_lag_s,
            "group_commit": {"batch": self.sync_batches.export(),
                             "sync": self.sync_seconds.export(),
                             "failures": self.sync_failures},
            "lag": lag_report,
            "isr": [self.isr_shrinks, self.isr_expands],
            "authentications": list(self.authentications),
            "followers": followers or [],
        }


def fetch_session_counts(connections) -> list[int]:
    """[sessions, partitions held in them] over the worker's connections (fetch_sessions.py)."""
    sessions = partitions = 0
    for connection in list(connections):
        held = getattr(connection, "fetch_sessions", None)
        if held is not None:
            sessions += len(held)
            partitions += held.partitions_held()
    return [sessions, partitions]


def _ignore(*_args) -> None:
    pass


class MetricsPublisher:
    """The worker's task that writes its document into shm and probes the event loop's lag."""

    def __init__(self, worker, clock=time.time):
        self.worker = worker
        self.clock = clock
        self._warned = False
        self._follower_lags: list = []
        self._lags_due = 0.0  # time.monotonic() when the follower lags are walked again

    def publish(self) -> None:
        worker = self.worker
        lag = worker.groups.lag.latest
        now = time.monotonic()
        if now >= self._lags_due:
            self._follower_lags = worker.replication.follower_lags()
            self._lags_due = now + FOLLOWER_LAGS_INTERVAL_S
        document = worker.statistics.document(worker.guard.stats, lag, self._follower_lags)
        document["cleaner"] = worker.cleaner.stats.document()
        document["fetch_sessions"] = fetch_session_counts(worker.connections)
        document["quotas"] = worker.quotas.document()
        now_ms = int(self.clock() * 1000)
        try:
            worker.region.metrics.publish(worker.index, document, now_ms)
        except DocumentTooLargeError as exc:
            if not self._warned:
                self._warned = True
                log.warning("worker %d: metrics document too large (%s): publishing the lag "
                            "report without its partitions", worker.index, exc)
            document["followers"] = []
            document["cleaner"]["dirty_ratios"] = []
            document["quotas"] = document["quotas"][:20]
            if lag is not None:
                document["lag"] = {**lag, "groups": [{**g, "partitions": []}
                                                     for g in lag["groups"]]}
            try:
                worker.region.metrics.publish(worker.index, document, now_ms)
            except DocumentTooLargeError:
                document["lag"] = None
                worker.region.metrics.publish(worker.index, document, now_ms)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_publish = loop.time()
        while True:
            before = loop.time()
            await asyncio.sleep(LOOP_LAG_PROBE_S)
            self.worker.statistics.loop_lag_s = max(0.0, loop.time() - before - LOOP_LAG_PROBE_S)
            if loop.time() >= next_publish:
                next_publish = loop.time() + PUBLISH_INTERVAL_S
                try:
                    self.publish()
                except Exception:  # statistics must never stop the worker, nor the next try
                    log.exception("worker %d: publishing its statistics failed",
                                  self.worker.index)
