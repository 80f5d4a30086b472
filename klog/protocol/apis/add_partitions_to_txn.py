"""AddPartitionsToTxn (key 24): a transactional producer names the partitions it is about to
write, before its first produce to each (v0-3, from clients).

v4+ (KIP-890's first part) is the broker-to-broker form: a partition leader asks the
transaction coordinator, for many transactional ids at once, whether each partition is in the
id's ongoing transaction (``verify_only``) before a transactional batch may start a
transaction there; v5 only adds the error code TRANSACTION_ABORTABLE. The v4+ response carries
a top-level error code (CLUSTER_AUTHORIZATION_FAILED when the caller is no broker) and one
result per transactional id.
"""

from __future__ import annotations

from klog.protocol.fieldtypes import BOOL, INT16, INT32, INT64, STRING, Array
from klog.protocol.schema import Field, Message, Struct

KEY = 24
FIRST_BROKER_VERSION = 4
CLIENT_MAX_VERSION = 3  # "versions 3 and below will be exclusively used by clients"


class AddPartitionsToTxnTopic(Struct):
    name = Field(STRING)
    partitions = Field(Array(INT32))


class AddPartitionsToTxnTransaction(Struct):
    transactional_id = Field(STRING, "4+")
    producer_id = Field(INT64, "4+")
    producer_epoch = Field(INT16, "4+")
    verify_only = Field(BOOL, "4+", default=False)
    topics = Field(Array(AddPartitionsToTxnTopic), "4+")


class AddPartitionsToTxnRequest(Message, versions="0-5", flexible="3+"):
    transactions = Field(Array(AddPartitionsToTxnTransaction), "4+")
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


class AddPartitionsToTxnResult(Struct):
    transactional_id = Field(STRING, "4+")
    topic_results = Field(Array(AddPartitionsToTxnTopicResult), "4+")


class AddPartitionsToTxnResponse(Message, versions="0-5", flexible="3+"):
    throttle_time_ms = Field(INT32)
    error_code = Field(INT16, "4+")
    results_by_transaction = Field(Array(AddPartitionsToTxnResult), "4+")
    results_by_topic_v3_and_below = Field(Array(AddPartitionsToTxnTopicResult), "0-3")


Request, Response = AddPartitionsToTxnRequest, AddPartitionsToTxnResponse


def topic_results(topics, code: int) -> list[AddPartitionsToTxnTopicResult]:
    """Every partition of ``topics`` (AddPartitionsToTxnTopic) answered ``code``."""
    return [AddPartitionsToTxnTopicResult(name=topic.name, results_by_partition=[
        AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
        for p in topic.partitions]) for topic in topics]


def error_response(request: AddPartitionsToTxnRequest | None, version: int,
                   code: int) -> AddPartitionsToTxnResponse | None:
    """v4+: the top-level error code (Kafka's getErrorResponse); below, every partition."""
    if version >= FIRST_BROKER_VERSION:
        return AddPartitionsToTxnResponse(error_code=code, results_by_transaction=[])
    if request is None:
        return None
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=topic_results(request.v3_and_below_topics, code))
