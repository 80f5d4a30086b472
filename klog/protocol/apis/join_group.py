"""JoinGroup (key 11): a consumer joins (or rejoins) a group; the coordinator picks a leader.

The member list with metadata goes only to the leader. v5 adds ``group_instance_id`` (static
membership, KIP-345); v4+ clients accept MEMBER_ID_REQUIRED (KIP-394). v0 is advertised for old
librdkafka's feature detection but not served.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BYTES, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 11


class JoinGroupRequestProtocol(Struct):
    name = Field(STRING)
    metadata = Field(BYTES)


class JoinGroupRequest(Message, versions="0-5", flexible="6+"):
    group_id = Field(STRING)
    session_timeout_ms = Field(INT32)
    rebalance_timeout_ms = Field(INT32, "1+", default=-1)
    member_id = Field(STRING)
    group_instance_id = Field(STRING, "5+", nullable="5+")
    protocol_type = Field(STRING)
    protocols = Field(Array(JoinGroupRequestProtocol))


class JoinGroupResponseMember(Struct):
    member_id = Field(STRING)
    group_instance_id = Field(STRING, "5+", nullable="5+")
    metadata = Field(BYTES)


class JoinGroupResponse(Message, versions="0-5", flexible="6+"):
    throttle_time_ms = Field(INT32, "2+")
    error_code = Field(INT16)
    generation_id = Field(INT32, default=-1)
    protocol_name = Field(STRING)
    leader = Field(STRING)
    member_id = Field(STRING)
    members = Field(Array(JoinGroupResponseMember))


Request, Response = JoinGroupRequest, JoinGroupResponse


def error_response(request: JoinGroupRequest | None, version: int, code: int) -> JoinGroupResponse:
    member_id = request.member_id if request is not None else ""
    return JoinGroupResponse(error_code=code, member_id=member_id)
