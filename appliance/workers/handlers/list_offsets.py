"""ListOffsets v1-5: earliest (-2), latest (-1), or the first offset at or after a timestamp.

In cluster mode only the leader answers, after KIP-320's check of `current_leader_epoch`
(consumer_fencing.py), and each answer carries a leader epoch (v4+), which clients keep with
the position to validate it after a leader change: for LATEST the partition's leader epoch
now; for EARLIEST and a timestamp, the epoch of the batch holding the offset, from the
leader-epoch cache. A leader just elected whose high watermark has not reached the start of
its own epoch yet (its followers have not fetched from it) answers LATEST, and a timestamp
it cannot place below that high watermark, with OFFSET_NOT_AVAILABLE (retriable, Kafka's
KIP-207 rule) instead of an offset below what the fleet already committed.

isolation_level read_committed (v2+, KIP-98) answers LATEST with the last stable offset, and
a timestamp only below it, as Kafka does.

v7's MAX_TIMESTAMP (-3, KIP-734) answers the offset and timestamp of the first record with the
largest timestamp below the high watermark (the last stable offset for read_committed);
v8's EARLIEST_LOCAL (-4, KIP-405) is the log start, klog having no tiered storage.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.segments.errors import StorageError
from appliance.workers import access
from appliance.workers.consumer_fencing import consumer_refusal
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import list_offsets
from klog.protocol.error_codes import ErrorCode

API_KEY = list_offsets.SPEC.key
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # KIP-734 (v7+): the record with the largest timestamp
EARLIEST_LOCAL = -4  # KIP-405 (v8+): the local log start; without tiered storage, EARLIEST
NO_EPOCH = -1
READ_COMMITTED = 1  # isolation_level (v2+; v1 has none: read_uncommitted)


def _refuse(index: int, error: ErrorCode):
    return list_offsets.ListOffsetsPartitionResponse(
        partition_index=index, error_code=int(error), timestamp=-1, offset=-1,
        leader_epoch=NO_EPOCH)


def _answer(worker, topic, part, replica_id: int, committed: bool = False):
    index = part.partition_index
    info = worker.control.topic(topic)
    if replica_id < 0:
        refused = consumer_refusal(info, index, part.current_leader_epoch, worker.node_id_of)
        if refused is not None:
            return _refuse(index, refused)
    partition = worker.partitions.get(topic, index)
    if partition is None:
        return _refuse(index, worker.absent_partition_error(topic, index))
    log = partition.log
    leader_epoch = (info.leadership[index].leader_epoch
                    if info is not None and info.leadership is not None else NO_EPOCH)
    # the leader-epoch cache of a replicated partition (a single copy's is never touched)
    epochs = log.leader_epochs if partition.role is not None else None
    try:
        lagging = epochs is not None and _high_watermark_lags(log, epochs, leader_epoch)
        if part.timestamp == LATEST:
            if lagging:
                return _refuse(index, ErrorCode.OFFSET_NOT_AVAILABLE)
            offset = log.last_stable_offset if committed else log.high_watermark
            timestamp, epoch = -1, leader_epoch
        else:
            if part.timestamp in (EARLIEST, EARLIEST_LOCAL):
                found = log.log_start_offset, -1
            elif part.timestamp == MAX_TIMESTAMP:
                found = log.offset_of_max_timestamp(
                    log.last_stable_offset if committed else log.high_watermark)
            else:
                found = log.offset_for_timestamp(part.timestamp)
                if committed and found is not None and found[0] >= log.last_stable_offset:
                    found = None  # past what read_committed consumers may read (Kafka's rule)
                if found is None and lagging:
                    return _refuse(index, ErrorCode.OFFSET_NOT_AVAILABLE)
            offset, timestamp = found if found is not None else (-1, -1)
            epoch = (epochs.epoch_for_offset(offset)
                     if epochs is not None and offset >= 0 else NO_EPOCH)
    except StorageError:
        return _refuse(index, ErrorCode.KAFKA_STORAGE_ERROR)
    return list_offsets.ListOffsetsPartitionResponse(
        partition_index=index, error_code=0, timestamp=timestamp, offset=offset,
        leader_epoch=epoch)


def _high_watermark_lags(log, epochs, leader_epoch: int) -> bool:
    """Whether the high watermark is still below the start of the leader's own epoch."""
    start = epochs.start_offset_of(leader_epoch)
    return start is not None and log.high_watermark < start


def handle(worker: HandlerContext, request):
    replica_id = request.body.replica_id
    committed = request.body.isolation_level == READ_COMMITTED
    denied = access.refused_topics(worker, request, Operation.DESCRIBE,
                                   [t.name for t in request.body.topics])
    topics = [
        list_offsets.ListOffsetsTopicResponse(
            name=topic.name,
            partitions=[_refuse(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                        if topic.name in denied
                        else _answer(worker, topic.name, p, replica_id, committed)
                        for p in topic.partitions])
        for topic in request.body.topics
    ]
    return list_offsets.Response(throttle_time_ms=0, topics=topics)
