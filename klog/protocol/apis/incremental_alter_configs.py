"""IncrementalAlterConfigs (key 44, KIP-339): change named keys of a resource's dynamic
configs, leaving the others as they are.

``config_operation``: 0 SET, 1 DELETE (back to the inherited value), 2 APPEND and 3 SUBTRACT
(list-valued keys such as cleanup.policy).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 44
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class AlterableConfig(Struct):
    name = Field(STRING)
    config_operation = Field(INT8)
    value = Field(STRING, nullable="0+")


class AlterConfigsResource(Struct):
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    configs = Field(Array(AlterableConfig))


class IncrementalAlterConfigsRequest(Message, versions="0-1", flexible="1+"):
    resources = Field(Array(AlterConfigsResource))
    validate_only = Field(BOOL)


class AlterConfigsResourceResponse(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    resource_type = Field(INT8)
    resource_name = Field(STRING)


class IncrementalAlterConfigsResponse(Message, versions="0-1", flexible="1+"):
    throttle_time_ms = Field(INT32)
    responses = Field(Array(AlterConfigsResourceResponse))


Request, Response = IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse


def error_response(
    request: IncrementalAlterConfigsRequest | None, version: int, code: int
) -> IncrementalAlterConfigsResponse | None:
    if request is None:
        return None
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResourceResponse(error_code=code, resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in request.resources])
