"""InitProducerId v0-4: a fresh producer id for an idempotent producer; with a transactional
id, the transaction coordinator's answer (a new id, or the id's epoch bumped, fencing the
producers before it; KIP-360's bump of a known id and epoch)."""

from __future__ import annotations

from appliance.security.acls import Operation, Permission, ResourceType
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError, fenced_code
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
        return _transactional(worker, request)
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


FENCED_SINCE = 4  # PRODUCER_FENCED (KIP-588); INVALID_PRODUCER_EPOCH before


def _answer(code: ErrorCode, version: int, producer_id: int = -1, producer_epoch: int = -1):
    return init_producer_id.Response(
        throttle_time_ms=0,
        error_code=int(fenced_code(code, version=version, fenced_since=FENCED_SINCE)),
        producer_id=producer_id, producer_epoch=producer_epoch)


def _transactional(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    if not body.transactional_id:
        return _answer(ErrorCode.INVALID_REQUEST, version)
    if not access.on_transactional_id(worker, request, Operation.WRITE, body.transactional_id):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, version)
    return _init(worker, body, version)


async def _init(worker: HandlerContext, body, version: int):
    try:
        meta = await worker.transactions.init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, body.producer_id,
            body.producer_epoch)
    except TxnError as exc:
        return _answer(exc.code, version)
    return _answer(ErrorCode.NONE, version, meta.producer_id, meta.producer_epoch)
