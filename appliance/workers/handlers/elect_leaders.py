"""ElectLeaders v0-2: preferred (type 0) and unclean (type 1) leader elections.

In a fleet the controller elects (`cluster/admin_requests.py`, `cluster/admin_elections.py`);
a worker of another appliance answers NOT_CONTROLLER, as a Kafka broker that is not the
controller does, and clients send this request to the controller anyway. Alone the appliance
is a single-node cluster: every partition has one replica, its leader, so no election is ever
needed (ELECTION_NOT_NEEDED; with a null list, an empty answer), unless the worker holding it
is down (PREFERRED_LEADER_NOT_AVAILABLE, or ELIGIBLE_LEADERS_NOT_AVAILABLE for unclean).
Needs ALTER on the cluster."""

from __future__ import annotations

import orjson

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import elect_leaders as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _requested(body) -> list[tuple[str, int]] | None:
    if body.topic_partitions is None:
        return None
    return list(dict.fromkeys((t.topic, p) for t in body.topic_partitions
                              for p in t.partitions))


def _alone(worker: HandlerContext, wanted: list[tuple[str, int]] | None, unclean: bool
           ) -> list[tuple[str, int, int, str | None]]:
    if wanted is None:  # every partition: none needs an election, and those are left out
        return []
    results = []
    for name, partition in wanted:
        info = worker.control.topic(name)
        if info is None or not info.has_partition(partition):
            results.append((name, partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"partition {name}-{partition} does not exist"))
        elif not worker.is_serving(info.owners[partition]):
            code = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE if unclean
                    else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
            results.append((name, partition, code, f"the replica of {name}-{partition} "
                            f"(node {worker.node_id_of(info.owners[partition])}) is down"))
        else:
            results.append((name, partition, ErrorCode.ELECTION_NOT_NEEDED,
                            f"node {worker.node_id_of(info.owners[partition])} leads "
                            f"{name}-{partition} already"))
    return results


def handle(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    unclean = version >= 1 and body.election_type == api.UNCLEAN
    if version >= 1 and body.election_type not in (api.PREFERRED, api.UNCLEAN):
        return api.error_response(body, version, int(ErrorCode.INVALID_REQUEST),
                                  f"unknown election type {body.election_type}")
    if not access.on_cluster(worker, request, Operation.ALTER):
        return api.error_response(body, version, int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    wanted = _requested(body)
    if worker.control.fleet_nodes is None:
        results = _alone(worker, wanted, unclean)
    else:
        error, answer = worker.control.cluster_admin("elect", orjson.dumps(
            {"partitions": wanted, "unclean": unclean}).decode())
        if error != ErrorCode.NONE:
            return api.error_response(body, version, int(error), answer)
        results = orjson.loads(answer)["results"]
    by_topic: dict[str, list] = {}
    for name, partition, code, message in results:
        by_topic.setdefault(name, []).append(api.PartitionResult(
            partition_id=partition, error_code=int(code), error_message=message))
    return api.Response(throttle_time_ms=0, error_code=0, replica_election_results=[
        api.ReplicaElectionResult(topic=name, partition_result=parts)
        for name, parts in by_topic.items()])
