"""DeleteRecords v0-2: move partitions' log start offsets up (Kafka's "delete records before
an offset"), on the partition's leader.

Kafka's rules, each partition on its own: the offset -1 means the high watermark; any other
negative offset, or one beyond the high watermark, is OFFSET_OUT_OF_RANGE and nothing moves;
an offset at or below the current log start changes nothing and succeeds. Internal topics are
refused (INVALID_TOPIC_EXCEPTION) and so are logs whose cleanup.policy lacks "delete"
(POLICY_VIOLATION), as Kafka's Partition.deleteRecordsOnLeader does. The answer's
low_watermark is the leader's log start afterwards.

The new log start is persisted at once (``partition.state``, klog's log-start-offset
checkpoint) and published to the other workers through the shm region, so reads below it
answer OFFSET_OUT_OF_RANGE on every worker and after a restart. Followers in a fleet move
theirs from the log_start_offset of their next fetch answer (Partition.follow_log_start), and
their following fetch states it back. As Kafka's DelayedDeleteRecords, the answer waits (up to
the request's timeout_ms) until every follower on a live node has its log start there (the
partition's low watermark, Partition.low_watermark); a wait that times out answers
REQUEST_TIMED_OUT for that partition (the leader's log start has moved all the same, and the
followers still follow).
"""

from __future__ import annotations

import asyncio
import logging

from appliance.security.acls import Operation
from appliance.segments.errors import StorageError
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import delete_records
from klog.protocol.error_codes import ErrorCode

API_KEY = delete_records.SPEC.key
HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK

log = logging.getLogger(__name__)


def _result(index: int, error: ErrorCode, low_watermark: int = -1):
    return delete_records.DeleteRecordsPartitionResult(
        partition_index=index, low_watermark=low_watermark, error_code=int(error))


def _delete_one(worker, topic: str, index: int, offset: int, waits: list):
    info = worker.control.topic(topic)
    if info is not None and info.internal:
        return _result(index, ErrorCode.INVALID_TOPIC_EXCEPTION)
    if not worker.leads(topic, index):
        return _result(index, worker.absent_partition_error(topic, index))
    partition = worker.partitions.get(topic, index)
    plog = partition.log
    if not plog.config.delete:
        return _result(index, ErrorCode.POLICY_VIOLATION)
    high_watermark = plog.high_watermark
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:
        return _result(index, ErrorCode.OFFSET_OUT_OF_RANGE)
    before = plog.log_start_offset
    if target > before:
        try:
            deleted = partition.delete_records_before(target, now_ms=worker.now_ms())
        except StorageError as exc:
            log.error("%s-%d: cannot delete records before %d: %s", topic, index, target, exc)
            return _result(index, ErrorCode.KAFKA_STORAGE_ERROR)
        log.info("%s-%d: DeleteRecords moved the log start %d -> %d, %d segment(s) deleted",
                 topic, index, before, plog.log_start_offset, deleted)
    result = _result(index, ErrorCode.NONE, plog.log_start_offset)
    if partition.role is not None:
        waits.append((result, partition, target))
    return result


async def _settle(waits: list, timeout_ms: int, response):
    """Kafka's DelayedDeleteRecords: each replicated partition's answer once its low
    watermark reached the offset, or REQUEST_TIMED_OUT / NOT_LEADER_OR_FOLLOWER."""
    outcomes = await asyncio.gather(*(partition.deleted_on_replicas(target, timeout_ms)
                                      for _, partition, target in waits))
    for (result, partition, _), error in zip(waits, outcomes, strict=True):
        if error != ErrorCode.NONE:
            result.error_code = int(error)
        result.low_watermark = partition.low_watermark()
    return response


def handle(worker: HandlerContext, request):
    denied = access.refused_topics(worker, request, Operation.DELETE,
                                   [t.name for t in request.body.topics])
    waits: list = []
    topics = [
        delete_records.DeleteRecordsTopicResult(name=topic.name, partitions=[
            _result(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if topic.name in denied
            else _delete_one(worker, topic.name, p.partition_index, p.offset, waits)
            for p in topic.partitions])
        for topic in request.body.topics
    ]
    response = delete_records.Response(throttle_time_ms=0, topics=topics)
    if not waits:
        return response
    return _settle(waits, request.body.timeout_ms, response)
