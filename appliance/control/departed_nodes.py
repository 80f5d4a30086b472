"""Nodes that left the fleet a moment ago, still listed in Metadata's brokers for a grace.

Why: when a leader's appliance dies, the first Metadata a client gets after the controller's
election both moves the partition to its new leader and drops the dead node from the brokers.
librdkafka (2.x) handles the two at once badly: decommissioning the dropped broker's handle
sends its partitions back to the internal broker with leader -1, undoing the move, and the
producer then waits for its next leader query (up to `retry.backoff.max.ms`, 1 s) before
producing again (perf/bench_failover.py measured it on every kill: a second beyond the
election). Listing the departed node a little longer lets the move finish first; the handle
is decommissioned at a later refresh, when no partition is delegated to it. Partitions never
name a departed node as leader (Metadata answers them from the live nodes), so no client is
sent there; the grace is `klog.metadata.departed.broker.grace.ms` (0: drop at once, as before),
and only for a node that left while still leading (a crash, not a controlled shutdown).
"""

from __future__ import annotations

import time

from appliance.control.topics import FleetNode


class DepartedNodes:
    """When each node left the live set, fed with every new live set."""

    def __init__(self) -> None:
        self._left: dict[int, tuple[FleetNode, float]] = {}

    def update(self, before: dict[int, FleetNode] | None, after: dict[int, FleetNode],
               leaders: set[int] | frozenset[int] = frozenset()) -> None:
        """`leaders`: the nodes leading a partition as last told. Only a node that left
        while leading is kept (one that died): a controlled shutdown moved its leadership
        away first, so it leaves Metadata at once, as before."""
        now = time.monotonic()
        for node_id, node in (before or {}).items():
            if node_id not in after and node_id in leaders:
                self._left[node_id] = (node, now)
        for node_id in after:
            self._left.pop(node_id, None)

    def within(self, grace_s: float) -> list[FleetNode]:
        """Those that left less than `grace_s` ago (forgetting the older ones)."""
        if grace_s <= 0:
            return []
        cutoff = time.monotonic() - grace_s
        for node_id in [n for n, (_, at) in self._left.items() if at < cutoff]:
            del self._left[node_id]
        return [node for node, _ in self._left.values()]
