"""ListTransactions (key 66, KIP-664; v1 KIP-994's duration filter): the transactional ids a
broker coordinates, filtered by state and producer id."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 66


class ListTransactionsRequest(Message, versions="0-1", flexible="0+"):
    state_filters = Field(Array(STRING))
    producer_id_filters = Field(Array(INT64))
    duration_filter = Field(INT64, "1+", default=-1)


class TransactionState(Struct):
    transactional_id = Field(STRING)
    producer_id = Field(INT64)
    transaction_state = Field(STRING)


class ListTransactionsResponse(Message, versions="0-1", flexible="0+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16)
    unknown_state_filters = Field(Array(STRING))
    transaction_states = Field(Array(TransactionState))


Request, Response = ListTransactionsRequest, ListTransactionsResponse


def error_response(request: object, version: int, code: int) -> ListTransactionsResponse:
    return ListTransactionsResponse(error_code=code, unknown_state_filters=[],
                                    transaction_states=[])
