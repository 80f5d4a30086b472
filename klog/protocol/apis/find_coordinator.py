"""FindCoordinator (key 10): which node coordinates a group (key_type 0) or a transactional id.

v4+ batches keys (``coordinator_keys``); klog stops at v2, which every client in scope uses.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING
from klog.protocol.schema import Field, Message

KEY = 10


class FindCoordinatorRequest(Message, versions="0-2", flexible="3+"):
    key = Field(STRING, "0-3")
    key_type = Field(INT8, "1+", default=0)


class FindCoordinatorResponse(Message, versions="0-2", flexible="3+"):
    throttle_time_ms = Field(INT32, "1+")
    error_code = Field(INT16, "0-3")
    error_message = Field(STRING, "1-3", nullable="1-3")
    node_id = Field(INT32, "0-3")
    host = Field(STRING, "0-3")
    port = Field(INT32, "0-3")


Request, Response = FindCoordinatorRequest, FindCoordinatorResponse


def error_response(request: object, version: int, code: int) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(error_code=code, node_id=-1, port=-1)
