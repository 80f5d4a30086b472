"""ListOffsets v1-5: earliest (-2), latest (-1), or the first offset at or after a timestamp."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import list_offsets

API_KEY = list_offsets.SPEC.key
LATEST = -1
EARLIEST = -2


def _answer(worker, topic, part):
    owned = worker.partitions.get(topic, part.partition_index)
    if owned is None:
        error = worker.absent_partition_error(topic, part.partition_index)
        return list_offsets.ListOffsetsPartitionResponse(
            partition_index=part.partition_index, error_code=int(error), timestamp=-1,
            offset=-1, leader_epoch=-1)
    log = owned.log
    if part.timestamp == LATEST:
        offset, timestamp = log.high_watermark, -1
    elif part.timestamp == EARLIEST:
        offset, timestamp = log.log_start_offset, -1
    else:
        found = log.offset_for_timestamp(part.timestamp)
        offset, timestamp = found if found is not None else (-1, -1)
    return list_offsets.ListOffsetsPartitionResponse(
        partition_index=part.partition_index, error_code=0, timestamp=timestamp, offset=offset,
        leader_epoch=-1)


def handle(worker: HandlerContext, request):
    topics = [
        list_offsets.ListOffsetsTopicResponse(
            name=topic.name, partitions=[_answer(worker, topic.name, p) for p in topic.partitions])
        for topic in request.body.topics
    ]
    return list_offsets.Response(throttle_time_ms=0, topics=topics)
