"""AlterClientQuotas (key 49, KIP-546): set or remove quota values (`producer_byte_rate`,
`consumer_byte_rate`, `request_percentage`, ...) of entities made of a user and/or a client
id; a null entity name is the default entity. v1 is the flexible encoding. One result per
entry, in the request's order.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, FLOAT64, INT16, INT32, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 49


class EntityData(Struct):
    entity_type = Field(STRING)
    entity_name = Field(STRING, nullable="0+", default=None)


class OpData(Struct):
    key = Field(STRING)
    value = Field(FLOAT64)
    remove = Field(BOOL)


# Kafka names both the request's and the response's entry struct EntryData: so do we (the
# schema check compares names), and export them as RequestEntry and ResponseEntry
class EntryData(Struct):
    entity = Field(Array(EntityData))
    ops = Field(Array(OpData))


RequestEntry = EntryData


class AlterClientQuotasRequest(Message, versions="0-1", flexible="1+"):
    entries = Field(Array(RequestEntry))
    validate_only = Field(BOOL)


class EntryData(Struct):  # noqa: F811 (the response's, see above)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    entity = Field(Array(EntityData))


ResponseEntry = EntryData
del EntryData


class AlterClientQuotasResponse(Message, versions="0-1", flexible="1+"):
    throttle_time_ms = Field(INT32)
    entries = Field(Array(ResponseEntry))


Request, Response = AlterClientQuotasRequest, AlterClientQuotasResponse


def error_response(request: AlterClientQuotasRequest | None, version: int, code: int,
                   message: str | None = None) -> AlterClientQuotasResponse | None:
    if request is None:
        return None
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        ResponseEntry(error_code=code, error_message=message, entity=[
            EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity]) for entry in request.entries])
