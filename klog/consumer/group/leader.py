"""The group leader's job: the whole group's assignment, from JoinGroup to SyncGroup. Pure.

The coordinator names one member leader and sends it every member's subscription. The leader
runs the assignor the coordinator chose (one every member offered) over them, with partition
counts from its own metadata, which must therefore cover every topic of the group, including
topics only other members subscribe to: before assigning, it asks for fresh metadata when any
of them is unknown (Java does the same). It remembers the counts it assigned with; when a
later metadata refresh shows a different count (partitions added, a subscribed topic created
or deleted), the group must rebalance (:meth:`Leadership.changed`).

Each member's assignment is written in the subscription version it spoke, clamped to ours.
"""

from __future__ import annotations

import struct

from klog.consumer.assignors import ASSIGNORS, Member
from klog.errors import KafkaError
from klog.metadata import ClusterMetadata
from klog.protocol.apis import sync_group
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import DecodeError
from klog.protocol.group_assignment import (
    HIGHEST_VERSION,
    decode_subscription,
    encode_assignment,
)
from klog.types import TopicPartition

_INT32 = struct.Struct(">i")


class Leadership:
    def __init__(self, answer):
        self.protocol: str = answer.protocol_name
        decoded = [member_of(m) for m in answer.members]
        self.members = [member for member, _ in decoded]
        self.versions = {m.member_id: version for m, version in decoded}
        self.topics = frozenset(t for m in self.members for t in m.topics)
        self.counts: dict[str, int] = {}
        self._asked_at_version: int | None = None
        self._checked_version = -1

    def assignments(self, cluster: ClusterMetadata) -> list | None:
        """SyncGroup's assignments, or None while metadata for the group's topics is on its
        way. Raises KafkaError if the coordinator chose an assignor we do not have."""
        if self._asked_at_version is None:  # ask once, even about topics known as errors
            if any(t not in cluster.leaders for t in self.topics):
                return self._ask(cluster)
        elif cluster.version == self._asked_at_version:
            return None
        elif any(t not in cluster.leaders and t not in cluster.errors for t in self.topics):
            return self._ask(cluster)  # that answer was to a request sent before we asked
        assignor = ASSIGNORS.get(self.protocol)
        if assignor is None:  # we offered only ours: the coordinator broke the protocol
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                             f"the coordinator chose {self.protocol!r}, which we did not offer")
        self.counts = {t: cluster.partition_count(t) or 0 for t in self.topics}
        self._checked_version = cluster.version
        result = assignor.assign(self.members, {t: n for t, n in self.counts.items() if n})
        return [sync_group.SyncGroupRequestAssignment(
            member_id=member_id, assignment=encode_assignment(
                tps, version=min(self.versions[member_id], HIGHEST_VERSION)))
            for member_id, tps in result.items()]

    def _ask(self, cluster: ClusterMetadata) -> None:
        self._asked_at_version = cluster.version
        cluster.want(self.topics)
        cluster.mark_stale()

    def changed(self, cluster: ClusterMetadata) -> str | None:
        """Why the group must rebalance after a metadata refresh, or None."""
        if cluster.version == self._checked_version or not self.counts:
            return None
        self._checked_version = cluster.version
        for topic, count in self.counts.items():
            known = topic in cluster.leaders or topic in cluster.errors
            if known and (cluster.partition_count(topic) or 0) != count:
                return f"the partitions of {topic!r} changed"
        return None


def member_of(m) -> tuple[Member, int]:
    """A JoinGroup member as the assignor sees it, and its subscription version. Bytes that
    do not decode subscribe to nothing: a broken peer gets no partitions."""
    try:
        sub = decode_subscription(m.metadata)
    except DecodeError:
        return Member(m.member_id, frozenset(), instance_id=m.group_instance_id), 0
    generation = sub.generation_id
    if sub.version < 2 and sub.user_data is not None and len(sub.user_data) == 4:
        (generation,) = _INT32.unpack(sub.user_data)  # cooperative-sticky before v2
    owned = tuple(TopicPartition(t, p) for t, ps in sub.owned_partitions.items() for p in ps)
    return Member(m.member_id, frozenset(sub.topics), owned, generation,
                  m.group_instance_id), sub.version
