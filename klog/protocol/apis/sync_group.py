"""SyncGroup (key 14): the leader hands out assignments; every member receives its own.

Assignment bytes are opaque to the broker (ConsumerProtocolAssignment, written by clients).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BYTES, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 14


class SyncGroupRequestAssignment(Struct):
    member_id = Field(STRING)
    assignment = Field(BYTES)


class SyncGroupRequest(Message, versions="0-3", flexible="4+"):
    group_id = Field(STRING)
    generation_id = Field(INT32)
    member_id = Field(STRING)
    group_instance_id = Field(STRING, "3+", nullable="3+")
    assignments = Field(Array(SyncGroupRequestAssignment))


class SyncGroupResponse(Message, versions="0-3", flexible="4+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16)
    assignment = Field(BYTES)


Request, Response = SyncGroupRequest, SyncGroupResponse


def error_response(request: object, version: int, code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code)
