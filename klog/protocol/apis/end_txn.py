"""EndTxn (key 26): a transactional producer commits or aborts its transaction. v4+ (KIP-890)
is not declared."""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING
from klog.protocol.schema import Field, Message

KEY = 26


class EndTxnRequest(Message, versions="0-3", flexible="3+"):
    transactional_id = Field(STRING)
    producer_id = Field(INT64)
    producer_epoch = Field(INT16)
    committed = Field(BOOL)


class EndTxnResponse(Message, versions="0-3", flexible="3+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)


Request, Response = EndTxnRequest, EndTxnResponse


def error_response(request: object, version: int, code: int) -> EndTxnResponse:
    return EndTxnResponse(error_code=code)
