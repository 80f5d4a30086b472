"""What every assignor takes and gives: the members as the leader sees them, and the result.

Its own module so that the assignors (`assignors`, and the big cooperative one in `sticky`)
import it and never each other: the registry in `assignors` imports `sticky`, never the
reverse (an import contract keeps it so).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from klog.types import TopicPartition

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


def all_partitions(members: Iterable[Member],
                   partitions_per_topic: dict[str, int]) -> list[TopicPartition]:
    """Every partition of a topic some member subscribes to, topics in name order."""
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    return [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]
