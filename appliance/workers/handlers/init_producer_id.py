"""InitProducerId v0-1: a fresh producer id for idempotent producers (no transactions)."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import init_producer_id
from klog.protocol.error_codes import ErrorCode

API_KEY = init_producer_id.SPEC.key


def handle(worker: HandlerContext, request):
    if request.body.transactional_id is not None:
        return init_producer_id.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            producer_id=-1, producer_epoch=-1)
    producer_id = worker.control.allocate_producer_id()
    if producer_id < 0:  # cluster mode, ZooKeeper unreachable: the client retries
        return init_producer_id.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            producer_id=-1, producer_epoch=-1)
    return init_producer_id.Response(throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                     producer_epoch=0)
