"""TxnOffsetCommit v0-3 (KIP-98, KIP-447): a transactional producer commits a group's offsets
inside its transaction. Served by the group's coordinator: the offsets are written to the
group's partition of ``__consumer_offsets`` as a transactional batch of the producer and held
pending until the transaction's marker lands there (``groups/pending.py``); the producer has
added that partition to its transaction with AddOffsetsToTxn first, so the transaction
coordinator sends it the marker.

Kafka's checks, in Kafka's order: WRITE on the transactional id, READ on the group (else
every partition answers the refusal), READ on each topic (TOPIC_AUTHORIZATION_FAILED) and the
topic's existence (UNKNOWN_TOPIC_OR_PARTITION); then the coordinator (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, which v0-1 hear as COORDINATOR_NOT_AVAILABLE); then, when a
v3 caller names its generation, member id or instance id, the member's fencing
(FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); then each partition's metadata
size. An older producer epoch than the partition knows is INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.offsets_log import Committed
from appliance.workers.groups.state import GroupState
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import txn_offset_commit as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
LOAD_ERROR_SINCE = 2  # older clients do not retry COORDINATOR_LOAD_IN_PROGRESS (KAFKA-7296)


def _answer(body, errors: dict, version: int):
    def code(error: ErrorCode) -> int:
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and version < LOAD_ERROR_SINCE:
            return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return int(error)

    return api.Response(throttle_time_ms=0, topics=[
        api.TxnOffsetCommitResponseTopic(name=topic.name, partitions=[
            api.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=code(errors[(topic.name, p.partition_index)]))
            for p in topic.partitions])
        for topic in body.topics])


def _member_error(group, body) -> ErrorCode:
    """Kafka's ``validateOffsetCommit`` for a transactional commit: a caller naming no member
    (v0-2, or a producer outside any group) is not checked; else ``validateCurrentMember``
    (a static instance mapped to another member id is a zombie: FENCED_INSTANCE_ID; an
    unknown instance or member: UNKNOWN_MEMBER_ID), then the generation."""
    if body.generation_id < 0 and not body.member_id and body.group_instance_id is None:
        return ErrorCode.NONE
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if body.group_instance_id is not None:
        current = group.static.get(body.group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != body.member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    elif body.member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if body.generation_id != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


def _partition_error(worker, topic: str, part) -> ErrorCode:
    info = worker.control.topic(topic)
    if info is None or not info.has_partition(part.partition_index):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    metadata = part.committed_metadata
    if metadata is not None and len(metadata.encode()) > worker.config.offset_metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


def handle(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    keys = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    if not access.on_transactional_id(worker, request, Operation.WRITE, body.transactional_id):
        return _answer(body, dict.fromkeys(
            keys, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), version)
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return _answer(body, dict.fromkeys(keys, ErrorCode.GROUP_AUTHORIZATION_FAILED), version)
    denied = access.refused_topics(worker, request, Operation.READ,
                                   [t.name for t in body.topics])
    errors = {}
    for topic in body.topics:
        for part in topic.partitions:
            errors[(topic.name, part.partition_index)] = (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic.name in denied
                else _partition_error(worker, topic.name, part))
    wanted = [k for k, e in errors.items() if e is ErrorCode.NONE
              or e is ErrorCode.OFFSET_METADATA_TOO_LARGE]
    if not wanted:
        return _answer(body, errors, version)
    try:
        group = worker.groups.group(body.group_id, create=False)
    except CoordinatorError as exc:
        errors.update(dict.fromkeys(wanted, exc.code))
        return _answer(body, errors, version)
    error = _member_error(group, body)
    if error is not ErrorCode.NONE:
        errors.update(dict.fromkeys(wanted, error))
        return _answer(body, errors, version)
    now_ms = worker.now_ms()
    offsets = {(topic.name, part.partition_index): Committed(
        part.committed_offset, part.committed_leader_epoch, part.committed_metadata, now_ms)
        for topic in body.topics for part in topic.partitions
        if errors[(topic.name, part.partition_index)] is ErrorCode.NONE}
    if not offsets:
        return _answer(body, errors, version)
    return _commit(worker, body, offsets, errors, version)


async def _commit(worker, body, offsets, errors, version):
    try:
        await worker.groups.commit_transactional(body.group_id, body.producer_id,
                                                 body.producer_epoch, offsets)
    except CoordinatorError as exc:
        errors.update(dict.fromkeys(offsets, exc.code))
    return _answer(body, errors, version)
