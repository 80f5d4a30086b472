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

from klog.types import TopicPartition

__all__ = ["ASSIGNORS", "Assignor", "Member", "assign_range", "assign_roundrobin",
           "member_order", "rebalance_protocol"]

EAGER, COOPERATIVE = "eager", "cooperative"

Assignments = dict[str, list[TopicPartition]]


class Member(NamedTuple):
    """One member as the leader sees it in the JoinGroup answer."""

    member_id: str
    topics: frozenset[str]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    instance_id: str | None = None


def member_order(member: Member) -> tuple[int, str]:
    """Java's MemberInfo order: static members by instance id first, then member ids."""
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


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


def all_partitions(members: Iterable[Member],
                   partitions_per_topic: dict[str, int]) -> list[TopicPartition]:
    """Every partition of a topic some member subscribes to, topics in name order."""
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]


class Assignor(NamedTuple):
    name: str
    assign: Callable[[list[Member], dict[str, int]], Assignments]
    cooperative: bool  # supports incremental cooperative rebalancing (KIP-429)


def _sticky(members: list[Member], partitions_per_topic: dict[str, int]) -> Assignments:
    from klog.consumer.sticky import assign_cooperative_sticky  # its own module: the big one

    return assign_cooperative_sticky(members, partitions_per_topic)


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (
    Assignor("range", assign_range, False),
    Assignor("roundrobin", assign_roundrobin, False),
    Assignor("cooperative-sticky", _sticky, True),
)}


def rebalance_protocol(names: Iterable[str]) -> str:
    """EAGER or COOPERATIVE for a consumer offering these assignors (Java's rule)."""
    return COOPERATIVE if all(ASSIGNORS[n].cooperative for n in names) else EAGER
