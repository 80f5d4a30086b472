"""DescribeConfigs (key 32): configuration of topics (resource_type 2) and brokers (4).

``configuration_keys = None`` asks for every key. ``is_default`` exists only in v0; later
versions say the same with ``config_source``.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 32


class DescribeConfigsResource(Struct):
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    configuration_keys = Field(Array(STRING), nullable="0+")


class DescribeConfigsRequest(Message, versions="0-3", flexible="4+"):
    resources = Field(Array(DescribeConfigsResource))
    include_synonyms = Field(BOOL, "1+", default=False)
    include_documentation = Field(BOOL, "3+", default=False)


class DescribeConfigsSynonym(Struct):
    name = Field(STRING, "1+")
    value = Field(STRING, "1+", nullable="0+")
    source = Field(INT8, "1+")


class DescribeConfigsResourceResult(Struct):
    name = Field(STRING)
    value = Field(STRING, nullable="0+")
    read_only = Field(BOOL)
    is_default = Field(BOOL, "0")
    config_source = Field(INT8, "1+", default=-1)
    is_sensitive = Field(BOOL)
    synonyms = Field(Array(DescribeConfigsSynonym), "1+")
    config_type = Field(INT8, "3+", default=0)
    documentation = Field(STRING, "3+", nullable="0+")


class DescribeConfigsResult(Struct):
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+")
    resource_type = Field(INT8)
    resource_name = Field(STRING)
    configs = Field(Array(DescribeConfigsResourceResult))


class DescribeConfigsResponse(Message, versions="0-3", flexible="4+"):
    throttle_time_ms = Field(INT32)
    results = Field(Array(DescribeConfigsResult))


Request, Response = DescribeConfigsRequest, DescribeConfigsResponse


def error_response(
    request: DescribeConfigsRequest | None, version: int, code: int
) -> DescribeConfigsResponse | None:
    if request is None:
        return None
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(error_code=code, resource_type=r.resource_type,
                              resource_name=r.resource_name)
        for r in request.resources
    ])  # fmt: skip
