"""What klog.Admin's consumer-group calls return, and how a DescribeGroups answer becomes one.

A coordinator hands out each member's subscription and assignment as opaque bytes (the
consumers' embedded protocol). For groups of protocol type "consumer" they are decoded here
with :mod:`klog.protocol.group_assignment`, so a caller sees topics and partitions; bytes of
another protocol type (Kafka Connect, a custom one), or bytes that do not decode, leave the
member's subscription and assignment empty rather than failing the whole description.
"""

from __future__ import annotations

from dataclasses import dataclass

from klog.protocol.exceptions import DecodeError
from klog.protocol.group_assignment import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription,
)
from klog.types import TopicPartition

__all__ = ["GroupDescription", "GroupListing", "MemberDescription", "describe_group"]


@dataclass(frozen=True, order=True)
class GroupListing:
    """One group as ListGroups shows it, with the node (worker) that coordinates it."""

    group_id: str
    protocol_type: str
    coordinator: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None  # static membership (KIP-345), None for dynamic members
    client_id: str
    client_host: str
    subscription: tuple[str, ...]  # topics the member asked for
    assignment: tuple[TopicPartition, ...]  # what the leader gave it (empty unless Stable)


@dataclass(frozen=True)
class GroupDescription:
    """A group's state ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or
    "Dead", which is also how a coordinator reports a group it does not know)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the assignor chosen for the current generation ("range", ...)
    members: tuple[MemberDescription, ...]
    coordinator: int

    @property
    def assigned(self) -> dict[TopicPartition, MemberDescription]:
        """Which member holds each assigned partition."""
        return {tp: m for m in self.members for tp in m.assignment}


def describe_group(described, coordinator: int) -> GroupDescription:
    """A GroupDescription from one DescribeGroups ``DescribedGroup`` (its error code already
    checked by the caller)."""
    consumer = described.protocol_type == PROTOCOL_TYPE
    members = tuple(sorted((_member(m, consumer) for m in described.members),
                           key=lambda m: m.member_id))
    return GroupDescription(described.group_id, described.group_state, described.protocol_type,
                            described.protocol_data, members, coordinator)


def _member(m, consumer: bool) -> MemberDescription:
    topics: tuple[str, ...] = ()
    assigned: tuple[TopicPartition, ...] = ()
    if consumer:
        topics = tuple(sorted(_subscription(bytes(m.member_metadata))))
        assigned = tuple(sorted(_assignment(bytes(m.member_assignment))))
    return MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             topics, assigned)


def _subscription(data: bytes) -> list[str]:
    if not data:  # no protocol chosen yet (the group's first rebalance)
        return []
    try:
        return decode_subscription(data).topics
    except (DecodeError, ValueError):
        return []


def _assignment(data: bytes) -> list[TopicPartition]:
    try:
        partitions = decode_assignment(data).partitions
    except (DecodeError, ValueError):
        return []
    return [TopicPartition(topic, p) for topic, numbers in partitions.items() for p in numbers]
