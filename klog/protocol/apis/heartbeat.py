"""Heartbeat (key 12): a member says it is alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING
from klog.protocol.schema import Field, Message

KEY = 12


class HeartbeatRequest(Message, versions="0-3", flexible="4+"):
    group_id = Field(STRING)
    generation_id = Field(INT32)
    member_id = Field(STRING)
    group_instance_id = Field(STRING, "3+", nullable="3+")


class HeartbeatResponse(Message, versions="0-3", flexible="4+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16)


Request, Response = HeartbeatRequest, HeartbeatResponse


def error_response(request: object, version: int, code: int) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code)
