"""ListPartitionReassignments v0 (KIP-455): the moves in flight, each partition with its
replicas (target and original) and those being added and removed. In a fleet from ZooKeeper
(`cluster/admin_reassignments.py`); alone nothing ever moves, so the answer is empty.
Partitions not moving, and unknown ones, are left out, as Kafka does. Needs DESCRIBE on the
cluster."""

from __future__ import annotations

import orjson

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import list_partition_reassignments as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _refused(body, error: ErrorCode, message: str):
    """Kafka's error answer to the whole request: the error at the top, and each partition
    asked for listed with empty replica lists (ListPartitionReassignmentsRequest's
    getErrorResponse)."""
    return api.Response(throttle_time_ms=0, error_code=int(error), error_message=message,
                        topics=[api.OngoingTopicReassignment(name=t.name, partitions=[
                            api.OngoingPartitionReassignment(
                                partition_index=p, replicas=[], adding_replicas=[],
                                removing_replicas=[])
                            for p in t.partition_indexes]) for t in body.topics or []])


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.DESCRIBE):
        return _refused(body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        "Cluster authorization failed.")
    if worker.control.fleet_nodes is None:
        return api.Response(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
    wanted = (None if body.topics is None
              else [[t.name, list(t.partition_indexes)] for t in body.topics])
    error, answer = worker.control.cluster_admin(
        "list_reassignments", orjson.dumps({"topics": wanted}).decode())
    if error != ErrorCode.NONE:
        return api.error_response(body, 0, int(error), answer)
    return api.Response(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        api.OngoingTopicReassignment(name=name, partitions=[
            api.OngoingPartitionReassignment(partition_index=p, replicas=list(replicas),
                                             adding_replicas=list(adding),
                                             removing_replicas=list(removing))
            for p, replicas, adding, removing in parts])
        for name, parts in orjson.loads(answer)["topics"]])
