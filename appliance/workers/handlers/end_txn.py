"""EndTxn v0-3: commit or abort a transaction. The decision (PrepareCommit or PrepareAbort)
is written to ``__transaction_state`` and answered; the coordinator then sends the markers and
writes CompleteCommit or CompleteAbort (``transactions/coordinator.py``)."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError, fenced_code
from klog.protocol.apis import end_txn as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
FENCED_SINCE = 2


def _answer(code: ErrorCode, version: int):
    return api.Response(throttle_time_ms=0, error_code=int(
        fenced_code(code, version=version, fenced_since=FENCED_SINCE)))


def handle(worker: HandlerContext, request):
    body, version = request.body, request.header.api_version
    if not access.on_transactional_id(worker, request, Operation.WRITE, body.transactional_id):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, version)
    return _end(worker, body, version)


async def _end(worker: HandlerContext, body, version: int):
    try:
        await worker.transactions.end_txn(body.transactional_id, body.producer_id,
                                          body.producer_epoch, body.committed)
    except TxnError as exc:
        return _answer(exc.code, version)
    return _answer(ErrorCode.NONE, version)
