"""OffsetFetch v1-7: a group's committed offsets (-1: none); ``topics = null`` (v2+) asks for
every partition the group has committed. Offsets pending in an open transaction
(TxnOffsetCommit) are never answered as committed; with ``require_stable`` (v7, KIP-447: a
read_committed consumer) such a partition answers UNSTABLE_OFFSET_COMMIT, which the client
retries until the transaction's marker lands."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import offset_fetch
from klog.protocol.error_codes import ErrorCode

API_KEY = offset_fetch.SPEC.key
TOP_LEVEL_ERROR_VERSION = 2


def _partition(index, committed, error=ErrorCode.NONE):
    if committed is None or error is not ErrorCode.NONE:
        return offset_fetch.OffsetFetchResponsePartition(
            partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
            metadata="", error_code=int(error))
    return offset_fetch.OffsetFetchResponsePartition(
        partition_index=index, committed_offset=committed.offset,
        committed_leader_epoch=committed.leader_epoch, metadata=committed.metadata or "",
        error_code=0)


def handle(worker: HandlerContext, request):
    body = request.body
    try:
        if not access.on_group(worker, request, Operation.READ, body.group_id):
            raise CoordinatorError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized")
        worker.groups.group(body.group_id, create=False)
    except CoordinatorError as exc:
        if request.header.api_version >= TOP_LEVEL_ERROR_VERSION:
            return offset_fetch.Response(throttle_time_ms=0, topics=[], error_code=int(exc.code))
        return offset_fetch.Response(throttle_time_ms=0, topics=[
            offset_fetch.OffsetFetchResponseTopic(name=t.name, partitions=[
                _partition(i, None, exc.code) for i in t.partition_indexes])
            for t in body.topics or []])
    committed = worker.groups.committed(body.group_id)
    if body.topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, index in sorted(committed):
            wanted.setdefault(topic, []).append(index)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in body.topics}
    # the topics the principal may not describe: left out of "all", refused when named
    denied = access.refused_topics(worker, request, Operation.DESCRIBE, wanted)
    if body.topics is None:
        wanted = {name: indexes for name, indexes in wanted.items() if name not in denied}
    unstable = worker.groups.unstable(body.group_id) if body.require_stable else ()
    topics = [offset_fetch.OffsetFetchResponseTopic(name=name, partitions=[
        _partition(i, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED) if name in denied
        else _partition(i, None, ErrorCode.UNSTABLE_OFFSET_COMMIT) if (name, i) in unstable
        else _partition(i, committed.get((name, i))) for i in indexes])
        for name, indexes in wanted.items()]
    return offset_fetch.Response(throttle_time_ms=0, topics=topics, error_code=0)
