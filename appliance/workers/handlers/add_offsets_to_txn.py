"""AddOffsetsToTxn v0-3: a transactional producer will commit a group's offsets in its
transaction: the group's partition of ``__consumer_offsets`` joins the transaction (so the
group coordinator gets the transaction's marker). The offsets themselves come with
TxnOffsetCommit, sent to the group coordinator."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.offsets_log import OFFSETS_TOPIC
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError, fenced_code
from klog.protocol.apis import add_offsets_to_txn as api
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
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return _answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, version)
    if not body.group_id:
        return _answer(ErrorCode.INVALID_GROUP_ID, version)
    try:
        _, partition = worker.groups.coordinator_partition(body.group_id)
    except CoordinatorError as exc:
        return _answer(exc.code, version)
    return _add(worker, body, partition, version)


async def _add(worker: HandlerContext, body, partition: int, version: int):
    try:
        await worker.transactions.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch,
            [(OFFSETS_TOPIC, partition)])
    except TxnError as exc:
        return _answer(exc.code, version)
    return _answer(ErrorCode.NONE, version)
