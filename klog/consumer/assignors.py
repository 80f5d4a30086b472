"""Partition assignors: how a group leader shares partitions among the members. Pure.

An assignor is a function of plain data: the members (id, static instance id, subscribed
topics, owned partitions, generation) and each topic's partition count, to each member's
partitions. The group leader runs the one the coordinator chose (JoinGroup's
``protocol_name``) over every member's subscription, whatever client the member is, so the
names and results are Kafka's:

- ``range``: per topic, the subscribed members in order each get a contiguous range; the
  first ``partitions % members`` get one more (Java's RangeAssignor).
- ``roundrobin``: every subscribed partition, topics in name order, dealt out one by one to
  the members in order, skipping members not subscribed to its topic (RoundRobinAssignor).
- ``cooperative-sticky``: balanced, keeps what members own, and moves partitions in two
  rebalances (KIP-429); see `klog.consumer.sticky`.

"In order" is Java's member order: static members first, by instance id, then dynamic ones
by member id. Topics unknown to the leader's metadata (``partitions_per_topic``) are skipped,
as Kafka does; every member appears in the result, possibly with nothing.

The rebalance *protocol* a consumer follows is decided by its whole assignor list (Java's
rule): cooperative only when every assignor it offers is cooperative, eager otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from klog.consumer.assignor_inputs import Assignments, Member, all_partitions, member_order
from klog.consumer.sticky import assign_cooperative_sticky
from klog.types import TopicPartition

__all__ = ["ASSIGNORS", "Assignor", "Member", "assign_range", "assign_roundrobin",
           "member_order", "rebalance_protocol"]

EAGER, COOPERATIVE = "eager", "cooperative"


def assign_range(members: list[Member], partitions_per_topic: dict[str, int]) -> Assignments:
    out: Assignments = {m.member_id: [] for m in members}
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    for topic in topics:
        takers = sorted((m for m in members if topic in m.topics), key=member_order)
        count = partitions_per_topic[topic]
        each, extra = divmod(count, len(takers))
        for i, member in enumerate(takers):
            start = each * i + min(i, extra)
            length = each + (1 if i < extra else 0)
            out[member.member_id].extend(TopicPartition(topic, p)
                                         for p in range(start, start + length))
    return out


def assign_roundrobin(members: list[Member],
                      partitions_per_topic: dict[str, int]) -> Assignments:
    out: Assignments = {m.member_id: [] for m in members}
    ring = sorted(members, key=member_order)
    if not ring:
        return out
    turn = 0
    for tp in all_partitions(members, partitions_per_topic):
        while tp.topic not in ring[turn % len(ring)].topics:
            turn += 1
        out[ring[turn % len(ring)].member_id].append(tp)
        turn += 1
    return out


class Assignor(NamedTuple):
    name: str
    assign: Callable[[list[Member], dict[str, int]], Assignments]
    cooperative: bool  # supports incremental cooperative rebalancing (KIP-429)




ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (
    Assignor("range", assign_range, False),
    Assignor("roundrobin", assign_roundrobin, False),
    Assignor("cooperative-sticky", assign_cooperative_sticky, True),
)}


def rebalance_protocol(names: Iterable[str]) -> str:
    """EAGER or COOPERATIVE for a consumer offering these assignors (Java's rule)."""
    return COOPERATIVE if all(ASSIGNORS[n].cooperative for n in names) else EAGER
