"""InitProducerId v0-1: a fresh producer id for idempotent producers (no transactions)."""

from __future__ import annotations

from appliance.security.acls import Operation, Permission, ResourceType
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import init_producer_id
from klog.protocol.error_codes import ErrorCode

API_KEY = init_producer_id.SPEC.key


def _may_write_idempotently(worker, request) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on any topic (Kafka's rule since 2.8)."""
    if worker.authorizer is None or access.on_cluster(worker, request,
                                                      Operation.IDEMPOTENT_WRITE):
        return True
    return any(a.operation in (Operation.WRITE, Operation.ALL)
               and a.permission is Permission.ALLOW
               and a.resource_type is ResourceType.TOPIC
               and access.on_topic(worker, request, Operation.WRITE, a.resource_name)
               for a in worker.control.acls.acls)


def handle(worker: HandlerContext, request):
    if request.body.transactional_id is not None:
        return init_producer_id.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            producer_id=-1, producer_epoch=-1)
    if not _may_write_idempotently(worker, request):
        return init_producer_id.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            producer_id=-1, producer_epoch=-1)
    producer_id = worker.control.allocate_producer_id()
    if producer_id < 0:  # cluster mode, ZooKeeper unreachable: the client retries
        return init_producer_id.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            producer_id=-1, producer_epoch=-1)
    return init_producer_id.Response(throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                     producer_epoch=0)
