"""AddPartitionsToTxn (key 24): a transactional producer names the partitions it is about to
write, before its first produce to each. v4+ (KIP-890, batched by broker) is not declared."""

from __future__ import annotations

from klog.protocol.fieldtypes import INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 24


class AddPartitionsToTxnTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(INT32))


class AddPartitionsToTxnRequest(Message, versions="0-3", flexible="3+"):
    v3_and_below_transactional_id = Field(STRING, "0-3")
    v3_and_below_producer_id = Field(INT64, "0-3")
    v3_and_below_producer_epoch = Field(INT16, "0-3")
    v3_and_below_topics = Field(Array(AddPartitionsToTxnTopic), "0-3")


class AddPartitionsToTxnPartitionResult(Struct):
    partition_index = Field(INT32)
    partition_error_code = Field(INT16)


class AddPartitionsToTxnTopicResult(Struct):
    name = Field(STRING)
    results_by_partition = Field(Array(AddPartitionsToTxnPartitionResult))


class AddPartitionsToTxnResponse(Message, versions="0-3", flexible="3+"):
    throttle_time_ms = Field(INT32)
    results_by_topic_v3_and_below = Field(Array(AddPartitionsToTxnTopicResult), "0-3")


Request, Response = AddPartitionsToTxnRequest, AddPartitionsToTxnResponse


def error_response(request: AddPartitionsToTxnRequest | None, version: int,
                   code: int) -> AddPartitionsToTxnResponse | None:
    if request is None:
        return None
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
        AddPartitionsToTxnTopicResult(name=topic.name, results_by_partition=[
            AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
            for p in topic.partitions])
        for topic in request.v3_and_below_topics])
