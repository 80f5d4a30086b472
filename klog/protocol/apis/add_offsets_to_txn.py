"""AddOffsetsToTxn (key 25): a transactional producer will commit a group's offsets in its
transaction (the group's partition of ``__consumer_offsets`` joins the transaction)."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING
from klog.protocol.schema import Field, Message

KEY = 25


class AddOffsetsToTxnRequest(Message, versions="0-3", flexible="3+"):
    transactional_id = Field(STRING)
    producer_id = Field(INT64)
    producer_epoch = Field(INT16)
    group_id = Field(STRING)


class AddOffsetsToTxnResponse(Message, versions="0-3", flexible="3+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)


Request, Response = AddOffsetsToTxnRequest, AddOffsetsToTxnResponse


def error_response(request: object, version: int, code: int) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(error_code=code)
