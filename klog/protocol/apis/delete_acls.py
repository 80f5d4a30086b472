"""DeleteAcls (key 31): remove the ACL bindings matching each filter; each filter's result
lists the bindings it removed.

v1 adds the pattern type (KIP-290: a filter may also say ANY or MATCH); v2 is flexible.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 31


class DeleteAclsFilter(Struct):
    resource_type_filter = Field(INT8)
    resource_name_filter = Field(STRING, nullable="0+")
    pattern_type_filter = Field(INT8, "1+", default=3)
    principal_filter = Field(STRING, nullable="0+")
    host_filter = Field(STRING, nullable="0+")
    operation = Field(INT8)
    permission_type = Field(INT8)


class DeleteAclsRequest(Message, versions="0-3", flexible="2+"):
    filters = Field(Array(DeleteAclsFilter))


class DeleteAclsMatchingAcl(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    pattern_type = Field(INT8, "1+", default=3)
    principal = Field(STRING)
    host = Field(STRING)
    operation = Field(INT8)
    permission_type = Field(INT8)


class DeleteAclsFilterResult(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    matching_acls = Field(Array(DeleteAclsMatchingAcl))


class DeleteAclsResponse(Message, versions="0-3", flexible="2+"):
    throttle_time_ms = Field(INT32)
    filter_results = Field(Array(DeleteAclsFilterResult))


Request, Response = DeleteAclsRequest, DeleteAclsResponse


def error_response(request: DeleteAclsRequest | None, version: int, code: int,
                   message: str | None = None) -> DeleteAclsResponse | None:
    if request is None:
        return None
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
        for _ in request.filters])
