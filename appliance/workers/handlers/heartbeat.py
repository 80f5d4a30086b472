"""Heartbeat v0-3: keeps a member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import heartbeat
from klog.protocol.error_codes import ErrorCode

API_KEY = heartbeat.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return heartbeat.Response(throttle_time_ms=0,
                                  error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    try:
        group = worker.groups.group(body.group_id, create=False)
    except CoordinatorError as exc:
        return heartbeat.Response(throttle_time_ms=0, error_code=int(exc.code))
    if group is None:
        error = ErrorCode.UNKNOWN_MEMBER_ID
    else:
        error = group.heartbeat(member_id=body.member_id, instance_id=body.group_instance_id,
                                generation=body.generation_id, now_ms=worker.now_ms())
    return heartbeat.Response(throttle_time_ms=0, error_code=int(error))
