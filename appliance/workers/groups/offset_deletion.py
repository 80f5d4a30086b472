"""OffsetDelete's decisions (KIP-496), as Kafka's GroupCoordinator.handleDeleteOffsets makes
them: which of a group's committed offsets may go, and what each partition is answered.

A dead or unknown group: GROUP_ID_NOT_FOUND. A live group of another protocol type than
"consumer" (e.g. Connect's): NON_EMPTY_GROUP, nothing deleted. An empty group: every listed
offset goes. A live consumer group: the offsets of topics a member is subscribed to stay
(GROUP_SUBSCRIBED_TO_TOPIC), the others go. A partition without an offset answers NONE.
"""

from __future__ import annotations

from appliance.workers.groups.group import Group
from appliance.workers.groups.state import GroupState
from klog.protocol.error_codes import ErrorCode
from klog.protocol.group_assignment import decode_subscription

CONSUMER = "consumer"


def subscribed_topics(group: Group) -> set[str]:
    """The topics the members' subscriptions (in the group's chosen protocol) name; a
    subscription that does not decode names none."""
    topics: set[str] = set()
    for member in group.members.values():
        names = [group.protocol] if group.protocol else member.names()
        for name in names:
            try:
                topics.update(decode_subscription(member.metadata_for(name)).topics)
            except Exception:  # noqa: BLE001 - a foreign client's bytes: skip, as Kafka does
                continue
    return topics


def group_refusal(group: Group | None) -> ErrorCode | None:
    """The group-level answer when no offset of the group may be deleted, or None."""
    if group is None or group.state is GroupState.DEAD:
        return ErrorCode.GROUP_ID_NOT_FOUND
    if group.state is not GroupState.EMPTY and group.protocol_type not in (None, "", CONSUMER):
        return ErrorCode.NON_EMPTY_GROUP
    return None


def partition_answers(group: Group, partitions, committed) -> tuple[dict, list]:
    """(answer per (topic, partition), the keys whose committed offsets go)."""
    consumed = set() if group.state is GroupState.EMPTY else subscribed_topics(group)
    answers, gone = {}, []
    for key in partitions:
        if key[0] in consumed:
            answers[key] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            continue
        answers[key] = ErrorCode.NONE
        if key in committed:
            gone.append(key)
    return answers, gone
