"""DescribeProducers (key 61, KIP-664): the idempotent and transactional producers a
partition's leader knows. Fields from Kafka's DescribeProducersRequest/Response v0 (flexible).
"""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 61


class TopicRequest(Struct):
    name = Field(STRING)
    partition_indexes = Field(Array(INT32))


class DescribeProducersRequest(Message, versions="0", flexible="0+"):
    topics = Field(Array(TopicRequest))


class ProducerState(Struct):
    producer_id = Field(INT64)
    producer_epoch = Field(INT32)
    last_sequence = Field(INT32, default=-1)
    last_timestamp = Field(INT64, default=-1)
    coordinator_epoch = Field(INT32)
    current_txn_start_offset = Field(INT64, default=-1)


class PartitionResponse(Struct):
    partition_index = Field(INT32)
    error_code = Field(INT16)
    error_message = Field(STRING, nullable="0+", default=None)
    active_producers = Field(Array(ProducerState))


class TopicResponse(Struct):
    name = Field(STRING)
    partitions = Field(Array(PartitionResponse))


class DescribeProducersResponse(Message, versions="0", flexible="0+"):
    throttle_time_ms = Field(INT32)
    topics = Field(Array(TopicResponse))


Request, Response = DescribeProducersRequest, DescribeProducersResponse


def error_response(
    request: DescribeProducersRequest | None, version: int, code: int
) -> DescribeProducersResponse | None:
    if request is None:
        return None
    return DescribeProducersResponse(throttle_time_ms=0, topics=[
        TopicResponse(name=t.name, partitions=[
            PartitionResponse(partition_index=i, error_code=code, error_message=None,
                              active_producers=[])
            for i in t.partition_indexes])
        for t in request.topics])
