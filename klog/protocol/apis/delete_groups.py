"""DeleteGroups (key 42): remove empty groups and their committed offsets (admin tools).

Not among Kafka's schema files in ../shared; the fields are Kafka's DeleteGroups v0-1.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 42


class DeleteGroupsRequest(Message, versions="0-1", flexible="2+"):
    groups_names = Field(Array(STRING))


class DeletableGroupResult(Struct):
    group_id = Field(STRING)
    error_code = Field(INT16)


class DeleteGroupsResponse(Message, versions="0-1", flexible="2+"):
    throttle_time_ms = Field(INT32)
    results = Field(Array(DeletableGroupResult))


Request, Response = DeleteGroupsRequest, DeleteGroupsResponse


def error_response(
    request: DeleteGroupsRequest | None, version: int, code: int
) -> DeleteGroupsResponse | None:
    if request is None:
        return None
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names],
    )
