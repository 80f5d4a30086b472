"""WriteTxnMarkers v0-1 (KIP-98): the transaction coordinator ends a producer's transaction on
the partitions this worker leads.

Each partition named gets one control batch (COMMIT or ABORT, `Partition.write_marker`),
replicated as any batch, and is answered once that batch is committed, as an acks=all
append is. Kafka's refusals: a partition not led here NOT_LEADER_OR_FOLLOWER (an unknown one
UNKNOWN_TOPIC_OR_PARTITION), an epoch older than the producer's INVALID_PRODUCER_EPOCH, a
coordinator epoch older than the last marker's TRANSACTION_COORDINATOR_FENCED. Only a broker
sends it: with an authorizer, CLUSTER_ACTION on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import write_txn_markers as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
TIMEOUT_MS = 30_000


def _write_one(worker, marker, topic: str, index: int, now_ms: int):
    """The partition's result, and the future its commit resolves (None: answered now)."""
    result = api.WritableTxnMarkerPartitionResult(partition_index=index, error_code=0)
    if not worker.leads(topic, index):
        result.error_code = int(worker.absent_partition_error(topic, index))
        return result, None
    outcome = worker.partitions.get(topic, index).write_marker(
        marker.producer_id, marker.producer_epoch, marker.transaction_result,
        marker.coordinator_epoch, now_ms, timeout_ms=TIMEOUT_MS)
    result.error_code = int(outcome.error)
    return result, outcome.committed


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.CLUSTER_ACTION):
        return api.error_response(body, request.header.api_version,
                                  int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    now_ms = worker.now_ms()
    waiting = []
    markers = []
    for marker in body.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                result, committed = _write_one(worker, marker, topic.name, index, now_ms)
                partitions.append(result)
                if committed is not None:
                    waiting.append((result, committed))
            topics.append(api.WritableTxnMarkerTopicResult(name=topic.name,
                                                           partitions=partitions))
        markers.append(api.WritableTxnMarkerResult(producer_id=marker.producer_id,
                                                   topics=topics))
    response = api.Response(markers=markers)
    if not waiting:
        return response
    return _when_committed(response, waiting)


def _when_committed(response, waiting) -> asyncio.Future:
    """The answer once every marker is committed (each future gives its ErrorCode)."""
    answer = waiting[0][1].get_loop().create_future()
    left = len(waiting)

    def committed(result, future: asyncio.Future) -> None:
        nonlocal left
        error = future.result()
        if error != ErrorCode.NONE:
            result.error_code = int(error)
        left -= 1
        if left == 0 and not answer.done():
            answer.set_result(response)

    for result, future in waiting:
        future.add_done_callback(lambda f, r=result: committed(r, f))
    return answer
