"""DescribeProducers v0 (KIP-664): the producers a partition's leader keeps state for (id,
epoch, last sequence, last timestamp, coordinator epoch, open transaction's first offset), as
`kafka-transactions describe-producers` shows them. Only the leader answers (Kafka's
NOT_LEADER_OR_FOLLOWER elsewhere); READ on the topic is required (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_producers as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
TOPIC_REFUSED = "Topic authorization failed."  # Kafka's ApiError(TOPIC_AUTHORIZATION_FAILED)


def _refused(index: int, error: ErrorCode, message: str | None = None) -> api.PartitionResponse:
    return api.PartitionResponse(partition_index=index, error_code=int(error),
                                 error_message=message, active_producers=[])


def _describe(worker, topic: str, index: int) -> api.PartitionResponse:
    if not worker.leads(topic, index):
        return _refused(index, worker.absent_partition_error(topic, index))
    producers = worker.partitions.get(topic, index).producers
    return api.PartitionResponse(partition_index=index, error_code=0, error_message=None,
                                 active_producers=[
        api.ProducerState(
            producer_id=pid, producer_epoch=entry.epoch,
            last_sequence=-1 if entry.last_sequence is None else entry.last_sequence,
            last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=txn_start)
        for pid, entry, txn_start in producers.described()])  # fmt: skip


def handle(worker: HandlerContext, request):
    denied = access.refused_topics(worker, request, Operation.READ,
                                   [t.name for t in request.body.topics])
    return api.Response(throttle_time_ms=0, topics=[
        api.TopicResponse(name=t.name, partitions=[
            _refused(i, ErrorCode.TOPIC_AUTHORIZATION_FAILED, TOPIC_REFUSED) if t.name in denied
            else _describe(worker, t.name, i)
            for i in t.partition_indexes])
        for t in request.body.topics])
