"""Where replicas go and who leads: pure decisions over plain data, as Kafka makes them.

A node is one worker (one disk) of an appliance; node id = broker.id * 100 + worker index.
An appliance is a failure domain (its workers share a host), so one partition's replicas go
to distinct appliances; with `broker.rack` set, they spread over racks first. Within an
appliance the least-loaded node (disk) takes the replica. Leaders (the first replica) rotate
over appliances so a topic's writes spread over the fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NODES_PER_APPLIANCE = 100


class PlacementError(ValueError):
    """The fleet cannot hold what is asked (more replicas than appliances, no live node)."""


def appliance_of(node_id: int) -> int:
    return node_id // NODES_PER_APPLIANCE


@dataclass(frozen=True)
class LiveNode:
    node_id: int
    rack: str | None = None

    @property
    def appliance(self) -> int:
        return appliance_of(self.node_id)


def place_replicas(partitions: Iterable[int], replication_factor: int,
                   live: Iterable[LiveNode], load: Mapping[int, int],
                   ) -> dict[int, tuple[int, ...]]:
    """Replicas (node ids, the preferred leader first) for each partition in `partitions`.

    `load` counts the replicas each node holds already (missing: 0); it is not changed."""
    nodes = sorted(live, key=lambda n: n.node_id)
    appliances = sorted({n.appliance for n in nodes})
    if not appliances:
        raise PlacementError("no appliance is live to hold replicas")
    if replication_factor > len(appliances):
        raise PlacementError(f"replication factor {replication_factor} is larger than the "
                             f"{len(appliances)} live appliance(s)")
    rack_of = {n.appliance: n.rack for n in nodes}
    counts = {n.node_id: load.get(n.node_id, 0) for n in nodes}
    by_appliance = {a: [n.node_id for n in nodes if n.appliance == a] for a in appliances}
    ordered = _rack_alternating(appliances, rack_of)
    start = min(range(len(ordered)), key=lambda i: (
        sum(counts[n] for n in by_appliance[ordered[i]]), i))
    out = {}
    for i, partition in enumerate(sorted(partitions)):
        chosen = [ordered[(start + i + k) % len(ordered)] for k in range(replication_factor)]
        replicas = []
        for appliance in chosen:
            node = min(by_appliance[appliance], key=lambda n: (counts[n], n))
            counts[node] += 1
            replicas.append(node)
        out[partition] = tuple(replicas)
    return out


def _rack_alternating(appliances: list[int], rack_of: Mapping[int, str | None]) -> list[int]:
    """Appliances ordered so that consecutive ones sit on different racks where possible
    (Kafka's rack-alternated broker list): any window of k appliances spans min(k, racks)."""
    racks: dict[str | None, list[int]] = {}
    for appliance in appliances:
        racks.setdefault(rack_of.get(appliance), []).append(appliance)
    if len(racks) <= 1:
        return list(appliances)
    queues = [list(members) for _, members in sorted(racks.items(), key=lambda r: str(r[0]))]
    out = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


def elect_leader(replicas: Iterable[int], isr: Iterable[int], live: set[int]) -> int:
    """The first replica, in assignment order, that is live and in the ISR; -1 if none.

    Never an out-of-sync replica: unclean election loses acknowledged writes."""
    in_sync = set(isr)
    return next((r for r in replicas if r in live and r in in_sync), -1)
