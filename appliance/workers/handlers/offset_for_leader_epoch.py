"""OffsetForLeaderEpoch v2-3: where a leader epoch ends in this leader's log (KIP-101, KIP-279).

Followers ask it before they fetch, to find how much of their log the leader shares; the
answer is the largest epoch the leader knows not above the one asked for, and its end offset
(the start of the next epoch, or the log end for the latest). Only the leader answers: its
log is the one the follower must match. `current_leader_epoch` fences callers with stale
metadata (KIP-320): older than ours is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.segments.errors import StorageError
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import offset_for_leader_epoch as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _answer(worker, topic: str, part) -> api.EpochEndOffset:
    def refuse(error: ErrorCode) -> api.EpochEndOffset:
        return api.EpochEndOffset(error_code=int(error), partition=part.partition,
                                  leader_epoch=-1, end_offset=-1)

    if not worker.leads(topic, part.partition):
        return refuse(worker.absent_partition_error(topic, part.partition))
    partition = worker.partitions.get(topic, part.partition)
    current = partition.role.state.leader_epoch if partition.role is not None else None
    if part.current_leader_epoch >= 0 and current is not None:
        if part.current_leader_epoch < current:
            return refuse(ErrorCode.FENCED_LEADER_EPOCH)
        if part.current_leader_epoch > current:
            return refuse(ErrorCode.UNKNOWN_LEADER_EPOCH)
    try:
        epoch, end = partition.log.end_offset_for_epoch(part.leader_epoch)
    except StorageError:
        return refuse(ErrorCode.KAFKA_STORAGE_ERROR)
    return api.EpochEndOffset(error_code=0, partition=part.partition, leader_epoch=epoch,
                              end_offset=end)


def _denied(worker, request, body) -> frozenset[str]:
    """A replica needs CLUSTER_ACTION on the cluster, a consumer DESCRIBE on the topic."""
    names = [t.topic for t in body.topics]
    if body.replica_id >= 0:
        allowed = access.on_cluster(worker, request, Operation.CLUSTER_ACTION)
        return frozenset() if allowed else frozenset(names)
    return access.refused_topics(worker, request, Operation.DESCRIBE, names)


def _refused(part) -> api.EpochEndOffset:
    return api.EpochEndOffset(error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                              partition=part.partition, leader_epoch=-1, end_offset=-1)


def handle(worker: HandlerContext, request):
    denied = _denied(worker, request, request.body)
    return api.Response(throttle_time_ms=0, topics=[
        api.OffsetForLeaderTopicResult(
            topic=topic.topic, partitions=[_refused(p) if topic.topic in denied
                                           else _answer(worker, topic.topic, p)
                                           for p in topic.partitions])
        for topic in request.body.topics])
