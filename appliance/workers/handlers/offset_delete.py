"""OffsetDelete v0 (KIP-496): remove some of a group's committed offsets, on its coordinator.

Kafka's checks in order: DELETE on the group (GROUP_AUTHORIZATION_FAILED, top level), READ on
each topic (TOPIC_AUTHORIZATION_FAILED), the partition must exist (UNKNOWN_TOPIC_OR_PARTITION);
then the coordinator decides (groups/offset_deletion.py): GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
or per partition GROUP_SUBSCRIBED_TO_TOPIC for a topic the live group consumes.
"""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import offset_delete
from klog.protocol.error_codes import ErrorCode

API_KEY = offset_delete.SPEC.key


def _response(error: ErrorCode, answers: dict, topics) -> offset_delete.OffsetDeleteResponse:
    if error != ErrorCode.NONE:
        return offset_delete.Response(error_code=int(error), throttle_time_ms=0, topics=[])
    return offset_delete.Response(error_code=0, throttle_time_ms=0, topics=[
        offset_delete.OffsetDeleteResponseTopic(name=t.name, partitions=[
            offset_delete.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=int(answers[(t.name, p.partition_index)]))
            for p in t.partitions])
        for t in topics])


async def _delete(worker, request):
    body = request.body
    if not access.on_group(worker, request, Operation.DELETE, body.group_id):
        return _response(ErrorCode.GROUP_AUTHORIZATION_FAILED, {}, body.topics)
    denied = access.refused_topics(worker, request, Operation.READ,
                                   [t.name for t in body.topics])
    answers: dict[tuple[str, int], ErrorCode] = {}
    asked = []
    for topic in body.topics:
        info = worker.control.topic(topic.name)
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if topic.name in denied:
                answers[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not info.has_partition(p.partition_index):
                answers[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                asked.append(key)
    error, decided = await worker.groups.delete_offsets(body.group_id, asked)
    answers.update(decided)
    return _response(error, answers, body.topics)


def handle(worker: HandlerContext, request):
    return _delete(worker, request)
