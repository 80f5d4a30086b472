"""The replication throttle on the follower's side: a reassignment's copying, limited to a rate.

Kafka's names and places: the rate is the node's dynamic config
`follower.replication.throttled.rate` (bytes per second, `/config/brokers/<node>`, which the
supervisor passes on with the fleet's nodes, else the default of every broker,
`/config/brokers/<default>`, from the dynamic config store); the throttled replicas are the
topic's config `follower.replication.throttled.replicas`, a list of `partition:node` (or `*`: every
replica). `klog cluster reassign --execute --throttle` sets both for the replicas a
reassignment adds, and `--verify` removes them once it is done.

Where the bytes move: this worker's replica fetchers ask the leader for no more of a
throttled partition than the node's bucket holds (`max_bytes`), leave it out of a fetch
while the bucket is empty, and spend what came back (`spend`). One bucket per node (a
worker), shared by its fetchers, as Kafka's quota is one per broker. As Kafka does, a
replica in the ISR is never throttled: once the new replica has caught up, acks=all writes
must not wait on the throttle.

Event loop only. A config that does not parse is treated as absent (and logged once): a
throttle must never stop replication.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from appliance.control.dynamic_configs import DEFAULT_ENTITY

log = logging.getLogger(__name__)

FOLLOWER_RATE = "follower.replication.throttled.rate"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BURST_S = 0.25  # the bucket holds at most this many seconds of the rate
MIN_DELAY_S = 0.01


def throttled_partitions(value: str, node_id: int) -> frozenset[int] | None:
    """The partitions `partition:node` entries of `value` throttle on `node_id`; None for
    `*` (all). Raises ValueError naming an entry that is not `partition:node`."""
    value = value.strip()
    if value == "*":
        return None
    found = set()
    for entry in filter(None, (e.strip() for e in value.split(","))):
        partition, sep, node = entry.partition(":")
        if not sep or not partition.strip().isdigit() or not node.strip().lstrip("-").isdigit():
            raise ValueError(f"{FOLLOWER_REPLICAS}: {entry!r} is not partition:node")
        if int(node) == node_id:
            found.add(int(partition))
    return frozenset(found)


class TokenBucket:
    """Bytes allowed at `rate` per second, holding at most `BURST_S` of it; a debt (a batch
    larger than what was left) is paid back before anything else is allowed. It starts
    empty (no burst at the start), and it allows a fetch once it holds half of what it can,
    so a slow rate still moves in fetches of a useful size."""

    def __init__(self, rate: int, *, now: float):
        self.rate = rate
        self.tokens = 0.0
        self.updated = now

    @property
    def capacity(self) -> float:
        return max(self.rate * BURST_S, 1.0)

    def _refill(self, now: float) -> None:
        self.tokens = min(self.tokens + (now - self.updated) * self.rate, self.capacity)
        self.updated = now

    def available(self, now: float) -> int:
        """Bytes that may be asked for now (0: wait `delay_s`)."""
        self._refill(now)
        return int(self.tokens) if self.tokens >= self.capacity / 2 else 0

    def spend(self, nbytes: int, now: float) -> None:
        self._refill(now)
        self.tokens -= nbytes

    def delay_s(self, now: float) -> float:
        """How long until `available` is more than 0."""
        self._refill(now)
        return max(MIN_DELAY_S, (self.capacity / 2 - self.tokens) / self.rate)


class FollowerThrottle:
    """A worker's throttle of its follower replicas (see the module docstring). `control`
    gives the topics' and the node's configs; `in_sync(key)` whether our replica of a
    partition is in its ISR."""

    def __init__(self, control, node_id: int, in_sync: Callable[[tuple[str, int]], bool], *,
                 clock=time.monotonic):
        self.control = control
        self.node_id = node_id
        self.in_sync = in_sync
        self.clock = clock
        self.bucket: TokenBucket | None = None
        self._reported: set[str] = set()

    def rate(self) -> int | None:
        configs = getattr(self.control, "fleet_node_configs", None) or {}
        text = configs.get(self.node_id, {}).get(FOLLOWER_RATE)
        if text is None:  # the node's own rate first, then every broker's default
            dynamic = getattr(self.control, "dynamic_configs", None) or {}
            text = dynamic.get("brokers", {}).get(DEFAULT_ENTITY, {}).get(FOLLOWER_RATE)
        if text is None:
            return None
        try:
            rate = int(text)
        except ValueError:
            self._report(f"{FOLLOWER_RATE}={text!r} is not a number of bytes per second")
            return None
        return rate if rate > 0 else None

    def throttled(self, key) -> bool:
        """Whether this worker's replica of `key` = (topic, partition) copies under the
        throttle: listed in the topic's config, and not in the ISR."""
        info = self.control.topic(key[0])
        value = info.configs.get(FOLLOWER_REPLICAS) if info is not None else None
        if not value:
            return False
        try:
            partitions = throttled_partitions(value, self.node_id)
        except ValueError as exc:
            self._report(f"{key[0]}: {exc}")
            return False
        if partitions is not None and key[1] not in partitions:
            return False
        return not self.in_sync(key)

    def limits(self, keys, default_bytes: int) -> tuple[dict, set]:
        """`partition_max_bytes` for each key of a fetch, and the keys throttled: those get a
        share of the bucket, or 0 (leave them out of this fetch) while it is empty; the
        others get `default_bytes`."""
        out = dict.fromkeys(keys, default_bytes)
        rate = self.rate()
        if rate is None:
            self.bucket = None
            return out, set()
        throttled = {k for k in keys if self.throttled(k)}
        if not throttled:
            return out, throttled
        now = self.clock()
        if self.bucket is None:
            self.bucket = TokenBucket(rate, now=now)
        self.bucket.rate = rate
        share = self.bucket.available(now) // len(throttled)
        for key in throttled:
            out[key] = min(default_bytes, share)
        return out, throttled

    def spend(self, nbytes: int) -> None:
        """Bytes of throttled partitions a fetch brought."""
        if self.bucket is not None and nbytes > 0:
            self.bucket.spend(nbytes, self.clock())

    def delay_s(self) -> float:
        """How long a fetcher with only throttled partitions waits before asking again."""
        if self.bucket is None:
            return MIN_DELAY_S
        return self.bucket.delay_s(self.clock())

    def _report(self, problem: str) -> None:
        if problem not in self._reported:
            self._reported.add(problem)
            log.error("replication throttle ignored: %s", problem)
