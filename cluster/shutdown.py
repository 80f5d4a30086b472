"""Controlled shutdown, the leaving appliance's side: what is left to move, read from a snapshot.

Kafka's broker sends its controller a ControlledShutdown request and retries until the
controller answers that nothing it leads could move. Here the request is an ephemeral znode,
`/klog/controlled_shutdown/<broker.id>` (`ClusterMember.request_controlled_shutdown`), that
the controller acts on in every pass while it exists (`leadership.settle`), and the answer
is the fleet itself: the appliance waits until `pending` is empty in its own snapshot. The
request goes with the appliance's session, so an appliance that dies or exits never leaves
one behind.
"""

from __future__ import annotations

from collections.abc import Iterator

from cluster.fleet_view import FleetSnapshot
from cluster.leadership import nodes_of, shutdown_pending
from cluster.znodes import PartitionState


def _partitions(snapshot: FleetSnapshot) -> Iterator[tuple[str, PartitionState,
                                                           tuple[int, ...]]]:
    for name, topic in sorted(snapshot.topics.items()):
        if name in snapshot.deleting:
            continue
        for partition, (state, _) in sorted(topic.states.items()):
            if partition in topic.replicas:
                yield f"{name}-{partition}", state, topic.replicas[partition]


def pending(snapshot: FleetSnapshot, nodes: set[int]) -> list[str]:
    """The partitions ("topic-p") the controller still has to change before the appliance of
    `nodes` leads nothing that another in-sync replica could take and sits in no ISR that a
    live leader keeps."""
    live = set(snapshot.brokers)
    return shutdown_pending(_partitions(snapshot), ours=nodes, live=live,
                            shutting=nodes_of(snapshot.shutting_down, live))


def leading(snapshot: FleetSnapshot, nodes: set[int]) -> list[str]:
    """The partitions ("topic-p") that one of `nodes` leads."""
    return [key for key, state, _ in _partitions(snapshot) if state.leader in nodes]
