"""DescribeTransactions v0 (KIP-664): the state of transactional ids this worker coordinates
(NOT_COORDINATOR for the others, TRANSACTIONAL_ID_NOT_FOUND for unknown ones)."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError
from klog.protocol.apis import describe_transactions as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def _error(transactional_id: str, code: ErrorCode):
    return api.TransactionState(error_code=int(code), transactional_id=transactional_id,
                                transaction_state="", transaction_timeout_ms=0,
                                transaction_start_time_ms=-1, producer_id=-1,
                                producer_epoch=-1, topics=[])


def _describe(worker: HandlerContext, request, transactional_id: str):
    if not access.on_transactional_id(worker, request, Operation.DESCRIBE, transactional_id):
        return _error(transactional_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        meta = worker.transactions.describe(transactional_id)
    except TxnError as exc:
        return _error(transactional_id, exc.code)
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        if access.on_topic(worker, request, Operation.DESCRIBE, topic):
            by_topic.setdefault(topic, []).append(index)
    return api.TransactionState(
        error_code=0, transactional_id=transactional_id, transaction_state=meta.state.label,
        transaction_timeout_ms=meta.timeout_ms, transaction_start_time_ms=meta.start_ms,
        producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
        topics=[api.TopicData(topic=t, partitions=p) for t, p in by_topic.items()])


def handle(worker: HandlerContext, request):
    return api.Response(throttle_time_ms=0, transaction_states=[
        _describe(worker, request, t) for t in request.body.transactional_ids])
