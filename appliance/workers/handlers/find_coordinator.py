"""FindCoordinator v0-2: the worker that coordinates a group (the owner of the group's
partition of ``__consumer_offsets``, created on first use as Kafka does)."""

from __future__ import annotations

from appliance.workers.groups.coordinator import CoordinatorError
from klog.protocol.apis import find_coordinator
from klog.protocol.errors import ErrorCode

API_KEY = find_coordinator.SPEC.key
GROUP_KEY = 0


def _error(code: ErrorCode, message: str | None = None):
    return find_coordinator.Response(throttle_time_ms=0, error_code=int(code),
                                     error_message=message or code.name, node_id=-1, host="",
                                     port=-1)


def handle(worker, request):
    body = request.body
    if body.key_type != GROUP_KEY:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "klog has no transactions")
    if not body.key:
        return _error(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
    try:
        owner = worker.groups.coordinator_of(body.key)
    except CoordinatorError as exc:
        return _error(exc.code, str(exc))
    if not worker.is_serving(owner):
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      f"the coordinator's worker {owner} is not serving")
    advertised = worker.config.advertised
    return find_coordinator.Response(throttle_time_ms=0, error_code=0, error_message=None,
                                     node_id=worker.node_id_of(owner), host=advertised.host,
                                     port=advertised.port + owner)
