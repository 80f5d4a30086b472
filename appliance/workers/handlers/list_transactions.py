"""ListTransactions v0-1 (KIP-664, KIP-994): the transactional ids this worker coordinates,
filtered by state names, producer ids and (v1) how long they have been open; only those the
principal may DESCRIBE."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnState
from klog.protocol.apis import list_transactions as api

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    states = {TxnState.from_label(name) for name in body.state_filters}
    unknown = [name for name in body.state_filters if TxnState.from_label(name) is None]
    producer_ids = set(body.producer_id_filters)
    now_ms = worker.now_ms()
    listed = []
    for meta in worker.transactions.listed():
        if body.state_filters and meta.state not in states:
            continue
        if producer_ids and meta.producer_id not in producer_ids:
            continue
        if body.duration_filter >= 0 and (
                meta.start_ms < 0 or now_ms - meta.start_ms < body.duration_filter):
            continue
        if not access.on_transactional_id(worker, request, Operation.DESCRIBE,
                                          meta.transactional_id):
            continue
        listed.append(api.TransactionState(transactional_id=meta.transactional_id,
                                           producer_id=meta.producer_id,
                                           transaction_state=meta.state.label))
    return api.Response(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                        transaction_states=listed)
