"""DescribeTransactions (key 65, KIP-664): the coordinator's state of transactional ids."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 65


class DescribeTransactionsRequest(Message, versions="0", flexible="0+"):
    transactional_ids = Field(Array(STRING))


class TopicData(Struct):
    topic = Field(STRING)
    partitions = Field(Array(INT32))


class TransactionState(Struct):
    error_code = Field(INT16)
    transactional_id = Field(STRING)
    transaction_state = Field(STRING)
    transaction_timeout_ms = Field(INT32)
    transaction_start_time_ms = Field(INT64)
    producer_id = Field(INT64)
    producer_epoch = Field(INT16)
    topics = Field(Array(TopicData))


class DescribeTransactionsResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    transaction_states = Field(Array(TransactionState))


Request, Response = DescribeTransactionsRequest, DescribeTransactionsResponse


def error_response(request: DescribeTransactionsRequest | None, version: int,
                   code: int) -> DescribeTransactionsResponse | None:
    if request is None:
        return None
    return DescribeTransactionsResponse(transaction_states=[
        TransactionState(error_code=code, transactional_id=t, transaction_state="",
                         transaction_timeout_ms=0, transaction_start_time_ms=-1,
                         producer_id=-1, producer_epoch=-1, topics=[])
        for t in request.transactional_ids])
