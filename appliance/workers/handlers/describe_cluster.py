"""DescribeCluster v0-1: the cluster id, the controller and the live brokers (each worker is one)
with their configured `broker.rack` (null when unset), as Metadata lists them, at their
endpoints of the listener the request came in on.

A ZooKeeper-mode cluster has no controller quorum to list: endpoint type 2 (controllers) is
answered UNSUPPORTED_VERSION, as Kafka answers it on a broker.

Kafka answers everyone (no refusal); only the cluster's authorized operations, when asked,
need DESCRIBE on the cluster: without it they are 0, with it the bit field of the cluster
operations the principal may do (Kafka's AuthHelper.authorizedOperations), INT32_MIN when
not asked."""

from __future__ import annotations

from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_cluster
from klog.protocol.error_codes import ErrorCode

API_KEY = describe_cluster.SPEC.key
NOT_ASKED = access.NOT_ASKED


def _authorized_operations(worker, request) -> int:
    if not request.body.include_cluster_authorized_operations:
        return NOT_ASKED
    return access.cluster_operations(worker, request)


def handle(worker: HandlerContext, request):
    endpoint_type = request.body.endpoint_type
    if endpoint_type != describe_cluster.BROKERS:
        return describe_cluster.error_response(
            request.body, request.header.api_version, int(ErrorCode.UNSUPPORTED_VERSION),
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
            "of type CONTROLLER" if endpoint_type == describe_cluster.CONTROLLERS
            else f"unknown endpoint type {endpoint_type}")
    brokers = [describe_cluster.DescribeClusterBroker(broker_id=n.node_id, host=n.host,
                                                      port=n.port, rack=n.rack)
               for n in worker.nodes(request.listener)]
    return describe_cluster.Response(
        throttle_time_ms=0, error_code=0, error_message=None,
        endpoint_type=describe_cluster.BROKERS, cluster_id=worker.cluster_id,
        controller_id=worker.controller_node_id, brokers=brokers,
        cluster_authorized_operations=_authorized_operations(worker, request))
