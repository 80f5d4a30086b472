"""AlterPartitionReassignments v0 (KIP-455): move partitions to new replicas, or cancel a move
(a null replica list).

In a fleet the reassignment machinery moves them (`cluster/admin_reassignments.py`, through
`cluster/admin_requests.py`): the answer comes once the controller has taken the request up;
ListPartitionReassignments then shows the moves until they end. Alone the appliance is a
single-node cluster: a partition's replica list is its one node, so the only assignment that
can be asked is the one it has (accepted, nothing moves); any other is refused with
INVALID_REPLICA_ASSIGNMENT, and cancelling answers NO_REASSIGNMENT_IN_PROGRESS.
Unknown partitions: UNKNOWN_TOPIC_OR_PARTITION. Needs ALTER on the cluster."""

from __future__ import annotations

import orjson

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import alter_partition_reassignments as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _alone(worker: HandlerContext, name: str, partition: int,
           replicas: list[int] | None) -> tuple[int, str | None]:
    info = worker.control.topic(name)
    if info is None or not info.has_partition(partition):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {name}-{partition} does not exist"
    if replicas is None:
        return (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                f"no reassignment of {name}-{partition} is in progress")
    current = [worker.node_id_of(info.owners[partition])]
    if list(replicas) == current:
        return ErrorCode.NONE, None
    return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"{name}-{partition}: an appliance running alone is a single-node cluster whose "
            f"partition {partition} lives on node {current[0]}; it cannot move to {replicas}")


def _refused(body, error: ErrorCode, message: str):
    """Kafka's error answer to the whole request: the error at the top and on every partition
    asked for (AlterPartitionReassignmentsRequest.getErrorResponse)."""
    return api.Response(throttle_time_ms=0, error_code=int(error), error_message=message,
                        responses=[api.ReassignableTopicResponse(name=t.name, partitions=[
                            api.ReassignablePartitionResponse(
                                partition_index=p.partition_index, error_code=int(error),
                                error_message=message)
                            for p in t.partitions]) for t in body.topics])


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.ALTER):
        return _refused(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "Cluster authorization failed.")
    wanted = [(t.name, p.partition_index, p.replicas) for t in body.topics for p in t.partitions]
    if worker.control.fleet_nodes is None:
        results = [(n, p, *_alone(worker, n, p, r)) for n, p, r in wanted]
    else:
        error, answer = worker.control.cluster_admin("alter_reassignments", orjson.dumps(
            {"partitions": wanted, "timeout_ms": body.timeout_ms}).decode())
        if error != ErrorCode.NONE:
            return api.error_response(body, 0, int(error), answer)
        results = orjson.loads(answer)["results"]
    by_topic: dict[str, list] = {}
    for name, partition, code, message in results:
        by_topic.setdefault(name, []).append(api.ReassignablePartitionResponse(
            partition_index=partition, error_code=int(code), error_message=message))
    return api.Response(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        api.ReassignableTopicResponse(name=name, partitions=parts)
        for name, parts in by_topic.items()])
