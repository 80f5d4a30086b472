"""AlterConfigs (key 33): replace a resource's whole set of dynamic configs.

Every key the request does not name loses its override (Kafka's semantics, which is why
IncrementalAlterConfigs exists). Resource types as DescribeConfigs: 2 topic, 4 broker.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 33


class AlterableConfig(Struct):
    name = Field(STRING)
    value = Field(STRING, nullable="0+")


class AlterConfigsResource(Struct):
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    configs = Field(Array(AlterableConfig))


class AlterConfigsRequest(Message, versions="0-2", flexible="2+"):
    resources = Field(Array(AlterConfigsResource))
    validate_only = Field(BOOL)


class AlterConfigsResourceResponse(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    resource_type = Field(INT8)
    resource_name = Field(STRING)


class AlterConfigsResponse(Message, versions="0-2", flexible="2+"):
    throttle_time_ms = Field(INT32)
    responses = Field(Array(AlterConfigsResourceResponse))


Request, Response = AlterConfigsRequest, AlterConfigsResponse


def error_response(
    request: AlterConfigsRequest | None, version: int, code: int
) -> AlterConfigsResponse | None:
    if request is None:
        return None
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=code, resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in request.resources])
