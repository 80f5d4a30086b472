"""ListGroups (key 16): every group this coordinator knows (admin tools)."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 16


class ListGroupsRequest(Message, versions="0-2", flexible="3+"):
    pass


class ListedGroup(Struct):
    group_id = Field(STRING)
    protocol_type = Field(STRING)


class ListGroupsResponse(Message, versions="0-2", flexible="3+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16)
    groups = Field(Array(ListedGroup))


Request, Response = ListGroupsRequest, ListGroupsResponse


def error_response(request: object, version: int, code: int) -> ListGroupsResponse:
    return ListGroupsResponse(error_code=code)
