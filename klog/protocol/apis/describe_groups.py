"""DescribeGroups (key 15): state, protocol and members of groups (admin tools, kcat -L)."""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, BYTES, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 15


class DescribeGroupsRequest(Message, versions="0-4", flexible="5+"):
    groups = Field(Array(STRING))
    include_authorized_operations = Field(BOOL, "3+")


class DescribedGroupMember(Struct):
    member_id = Field(STRING)
    group_instance_id = Field(STRING, "4+", nullable="4+")
    client_id = Field(STRING)
    client_host = Field(STRING)
    member_metadata = Field(BYTES)
    member_assignment = Field(BYTES)


class DescribedGroup(Struct):
    error_code = Field(INT16)
    group_id = Field(STRING)
    group_state = Field(STRING)
    protocol_type = Field(STRING)
    protocol_data = Field(STRING)
    members = Field(Array(DescribedGroupMember))
    authorized_operations = Field(INT32, "3+", default=-(2**31))


class DescribeGroupsResponse(Message, versions="0-4", flexible="5+"):
    throttle_time_ms = Field(INT32, "1+")
    groups = Field(Array(DescribedGroup))


Request, Response = DescribeGroupsRequest, DescribeGroupsResponse


def error_response(
    request: DescribeGroupsRequest | None, version: int, code: int
) -> DescribeGroupsResponse | None:
    if request is None:
        return None
    return DescribeGroupsResponse(
        groups=[DescribedGroup(error_code=code, group_id=g) for g in request.groups]
    )
