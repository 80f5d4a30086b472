"""FindCoordinator v0-2: the node that coordinates a group (key type 0: the leader of the
group's partition of ``__consumer_offsets``) or a transactional id (key type 1: the leader of
its partition of ``__transaction_state``), each topic created on first use as Kafka does."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.handler_context import HandlerContext
from appliance.workers.transactions.state import TxnError
from klog.protocol.apis import find_coordinator
from klog.protocol.error_codes import ErrorCode

API_KEY = find_coordinator.SPEC.key
GROUP_KEY = 0
TRANSACTION_KEY = 1


def _error(code: ErrorCode, message: str | None = None):
    return find_coordinator.Response(throttle_time_ms=0, error_code=int(code),
                                     error_message=message or code.name, node_id=-1, host="",
                                     port=-1)


def handle(worker: HandlerContext, request):
    body = request.body
    if body.key_type == TRANSACTION_KEY:
        return _transaction_coordinator(worker, request)
    if body.key_type != GROUP_KEY:
        return _error(ErrorCode.INVALID_REQUEST, f"unknown key type {body.key_type}")
    if not body.key:
        return _error(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
    if not access.on_group(worker, request, Operation.DESCRIBE, body.key):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        info, partition = worker.groups.coordinator_partition(body.key)
    except CoordinatorError as exc:
        return _error(exc.code, str(exc))
    leader = worker.partition_leader(info, partition, request.listener)  # its listener's
    if leader is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      f"partition {partition} of {info.name}, which holds this group, "
                      f"has no leader serving")
    return find_coordinator.Response(throttle_time_ms=0, error_code=0, error_message=None,
                                     node_id=leader.node_id, host=leader.host, port=leader.port)


def _transaction_coordinator(worker: HandlerContext, request):
    transactional_id = request.body.key
    if not transactional_id:
        return _error(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
    if not access.on_transactional_id(worker, request, Operation.DESCRIBE, transactional_id):
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    try:
        info, partition = worker.transactions.coordinator_partition(transactional_id)
    except TxnError as exc:
        return _error(exc.code, str(exc))
    leader = worker.partition_leader(info, partition, request.listener)
    if leader is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      f"partition {partition} of {info.name}, which holds this transactional "
                      f"id, has no leader serving")
    return find_coordinator.Response(throttle_time_ms=0, error_code=0, error_message=None,
                                     node_id=leader.node_id, host=leader.host, port=leader.port)
