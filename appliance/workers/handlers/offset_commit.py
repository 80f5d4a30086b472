"""OffsetCommit v2-7: a member of the current generation (or, for an empty group, anyone
with generation -1: a "simple" commit from an assign() consumer or an admin tool) stores
offsets; the answer waits until they are durable."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.offsets_log import Committed
from appliance.workers.groups.state import GroupState
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import offset_commit
from klog.protocol.error_codes import ErrorCode

API_KEY = offset_commit.SPEC.key


def _member_error(group, body) -> ErrorCode:
    """Kafka's checks, in Kafka's order."""
    if body.generation_id_or_member_epoch < 0 and (group is None or
                                                    group.state is GroupState.EMPTY):
        return ErrorCode.NONE
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    error = group.check_member(body.member_id, body.group_instance_id,
                               body.generation_id_or_member_epoch)
    if error is ErrorCode.NONE and group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return error


def _partition_error(worker, topic, part) -> ErrorCode:
    info = worker.control.topic(topic)
    if info is None or not info.has_partition(part.partition_index):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    metadata = part.committed_metadata
    if metadata is not None and len(metadata.encode()) > worker.config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


def _answer(body, errors: dict):
    return offset_commit.Response(throttle_time_ms=0, topics=[
        offset_commit.OffsetCommitResponseTopic(name=topic.name, partitions=[
            offset_commit.OffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=int(errors[(topic.name, p.partition_index)]))
            for p in topic.partitions])
        for topic in body.topics])


def handle(worker: HandlerContext, request):
    body = request.body
    coordinator = worker.groups
    keys = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return _answer(body, dict.fromkeys(keys, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    denied = access.refused_topics(worker, request, Operation.READ,
                                   [t.name for t in body.topics])
    try:
        group = coordinator.group(body.group_id, create=False)
    except CoordinatorError as exc:
        return _answer(body, dict.fromkeys(keys, exc.code))
    error = _member_error(group, body)
    if error is not ErrorCode.NONE:
        return _answer(body, dict.fromkeys(keys, error))
    now_ms = worker.now_ms()
    if group is not None and group.member(body.member_id) is not None:
        member = group.member(body.member_id)
        member.deadline_ms = max(member.deadline_ms, now_ms + member.session_timeout_ms)
    errors, offsets = {}, {}
    for topic in body.topics:
        for part in topic.partitions:
            key = (topic.name, part.partition_index)
            errors[key] = (ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic.name in denied
                           else _partition_error(worker, topic.name, part))
            if errors[key] is ErrorCode.NONE:
                offsets[key] = Committed(part.committed_offset, part.committed_leader_epoch,
                                         part.committed_metadata, now_ms)
    if not offsets:
        return _answer(body, errors)
    return _commit(coordinator, body, offsets, errors)


async def _commit(coordinator, body, offsets, errors):
    try:
        await coordinator.commit(body.group_id, offsets)
    except CoordinatorError as exc:
        errors.update(dict.fromkeys(offsets, exc.code))
    return _answer(body, errors)
