"""DescribeAcls (key 29): the ACL bindings that match a filter (admin clients, `klog acls list`).

v1 adds the pattern type (KIP-290: PREFIXED); v2 is the flexible encoding (librdkafka sends
v2, kafka-python v3). Codes are Kafka's AclResourceType, AclPatternType, AclOperation and
AclPermissionType numbers (see :mod:`appliance.security.acls`).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 29


class DescribeAclsRequest(Message, versions="0-3", flexible="2+"):
    resource_type_filter = Field(INT8)
    resource_name_filter = Field(STRING, nullable="0+")
    pattern_type_filter = Field(INT8, "1+", default=3)
    principal_filter = Field(STRING, nullable="0+")
    host_filter = Field(STRING, nullable="0+")
    operation = Field(INT8)
    permission_type = Field(INT8)


class AclDescription(Struct):
    principal = Field(STRING)
    host = Field(STRING)
    operation = Field(INT8)
    permission_type = Field(INT8)


class DescribeAclsResource(Struct):
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    pattern_type = Field(INT8, "1+", default=3)
    acls = Field(Array(AclDescription))


class DescribeAclsResponse(Message, versions="0-3", flexible="2+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    resources = Field(Array(DescribeAclsResource))


Request, Response = DescribeAclsRequest, DescribeAclsResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> DescribeAclsResponse:
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                resources=[])
