"""CreateAcls (key 30): add ACL bindings, one result per creation, in order.

v1 adds the pattern type (KIP-290); v2 is the flexible encoding.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 30


class AclCreation(Struct):
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    resource_pattern_type = Field(INT8, "1+", default=3)
    principal = Field(STRING)
    host = Field(STRING)
    operation = Field(INT8)
    permission_type = Field(INT8)


class CreateAclsRequest(Message, versions="0-3", flexible="2+"):
    creations = Field(Array(AclCreation))


class AclCreationResult(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)


class CreateAclsResponse(Message, versions="0-3", flexible="2+"):
    throttle_time_ms = Field(INT32)
    results = Field(Array(AclCreationResult))


Request, Response = CreateAclsRequest, CreateAclsResponse


def error_response(request: CreateAclsRequest | None, version: int, code: int,
                   message: str | None = None) -> CreateAclsResponse | None:
    if request is None:
        return None
    return CreateAclsResponse(throttle_time_ms=0, results=[
        AclCreationResult(error_code=code, error_message=message) for _ in request.creations])
