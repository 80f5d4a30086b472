"""The member's four group requests, built from plain values. Pure.

JoinGroup and SyncGroup are held by the coordinator until the rest of the group catches up,
up to the rebalance timeout (our ``max_poll_interval_ms``): they travel on their own
connection (channel "group") so nothing queues behind them, with that timeout plus Java's 5 s
lapse. Heartbeat and LeaveGroup are quick and share the coordinator's main connection.

Our subscription is written in the newest version (3) for every assignor offered; only
cooperative-sticky has user data: the generation, as Java writes it for leaders that read
subscriptions older than v2.
"""

from __future__ import annotations

import struct

from klog.outgoing import Outgoing
from klog.protocol.apis import heartbeat, join_group, leave_group, sync_group
from klog.protocol.group_assignment import PROTOCOL_TYPE, encode_subscription

JOIN_TIMEOUT_LAPSE_MS = 5_000
_INT32 = struct.Struct(">i")


def join_request(config, node: int, member_id: str, generation: int, topics, owned) -> Outgoing:
    protocols = [join_group.JoinGroupRequestProtocol(name=name, metadata=encode_subscription(
        topics, _INT32.pack(generation) if name == "cooperative-sticky" else None, owned,
        generation_id=generation)) for name in config.partition_assignment_strategy]
    body = join_group.Request(
        group_id=config.group_id, session_timeout_ms=config.session_timeout_ms,
        rebalance_timeout_ms=config.max_poll_interval_ms, member_id=member_id,
        group_instance_id=config.group_instance_id, protocol_type=PROTOCOL_TYPE,
        protocols=protocols)
    return Outgoing(node, join_group, body, channel="group", timeout_ms=_held_ms(config))


def sync_request(config, node: int, member_id: str, generation: int,
                 assignments: list) -> Outgoing:
    body = sync_group.Request(group_id=config.group_id, generation_id=generation,
                              member_id=member_id, group_instance_id=config.group_instance_id,
                              assignments=assignments)
    return Outgoing(node, sync_group, body, channel="group", timeout_ms=_held_ms(config))


def heartbeat_request(config, node: int, member_id: str, generation: int) -> Outgoing:
    body = heartbeat.Request(group_id=config.group_id, generation_id=generation,
                             member_id=member_id, group_instance_id=config.group_instance_id)
    return Outgoing(node, heartbeat, body, context=(generation, member_id))


def leave_request(config, node: int, member_id: str) -> Outgoing:
    """v0-2 carry the member id, v3 a list of members (a dynamic one: no instance id)."""
    body = leave_group.Request(group_id=config.group_id, member_id=member_id, members=[
        leave_group.MemberIdentity(member_id=member_id, group_instance_id=None)])
    return Outgoing(node, leave_group, body)


def _held_ms(config) -> int:
    return max(config.request_timeout_ms, config.max_poll_interval_ms + JOIN_TIMEOUT_LAPSE_MS)
