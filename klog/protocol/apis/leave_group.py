"""LeaveGroup (key 13): members leave a group; v0-2 carry one ``member_id``, v3 a batch."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 13


class MemberIdentity(Struct):
    member_id = Field(STRING, "3+")
    group_instance_id = Field(STRING, "3+", nullable="3+")


class LeaveGroupRequest(Message, versions="0-3", flexible="4+"):
    group_id = Field(STRING)
    member_id = Field(STRING, "0-2")
    members = Field(Array(MemberIdentity), "3+")


class MemberResponse(Struct):
    member_id = Field(STRING, "3+")
    group_instance_id = Field(STRING, "3+", nullable="3+")
    error_code = Field(INT16, "3+")


class LeaveGroupResponse(Message, versions="0-3", flexible="4+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16)
    members = Field(Array(MemberResponse), "3+")


Request, Response = LeaveGroupRequest, LeaveGroupResponse


def error_response(request: object, version: int, code: int) -> LeaveGroupResponse:
    return LeaveGroupResponse(error_code=code)
