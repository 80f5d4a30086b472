"""DescribeClientQuotas (key 48, KIP-546): the quota entities (user, client-id) and their
values that match a filter of components. v1 is the flexible encoding. Match types are
Kafka's: 0 the exact name, 1 the default entity, 2 any specified name.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, FLOAT64, INT8, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 48
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class ComponentData(Struct):
    entity_type = Field(STRING)
    match_type = Field(INT8)
    match = Field(STRING, nullable="0+", default=None)


class DescribeClientQuotasRequest(Message, versions="0-1", flexible="1+"):
    components = Field(Array(ComponentData))
    strict = Field(BOOL)


class EntityData(Struct):
    entity_type = Field(STRING)
    entity_name = Field(STRING, nullable="0+", default=None)


class ValueData(Struct):
    key = Field(STRING)
    value = Field(FLOAT64)


class EntryData(Struct):
    entity = Field(Array(EntityData))
    values = Field(Array(ValueData))


class DescribeClientQuotasResponse(Message, versions="0-1", flexible="1+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    entries = Field(Array(EntryData), nullable="0+", default=None)


Request, Response = DescribeClientQuotasRequest, DescribeClientQuotasResponse


def error_response(request: object, version: int, code: int,
                   message: str | None = None) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=code,
                                        error_message=message, entries=None)
