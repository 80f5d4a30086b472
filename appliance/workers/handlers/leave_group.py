"""LeaveGroup v0-3: one member (v0-2) or a batch of members by id or instance id (v3)."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import leave_group
from klog.protocol.error_codes import ErrorCode

API_KEY = leave_group.SPEC.key
BATCH_VERSION = 3


def handle(worker: HandlerContext, request):
    body = request.body
    batched = request.header.api_version >= BATCH_VERSION
    leaving = ([(m.member_id, m.group_instance_id) for m in body.members] if batched
               else [(body.member_id, None)])
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return leave_group.Response(
            throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), members=[])
    try:
        group = worker.groups.group(body.group_id, create=False)
    except CoordinatorError as exc:
        return leave_group.Response(throttle_time_ms=0, error_code=int(exc.code), members=[])
    now_ms = worker.now_ms()
    results = []
    for member_id, instance_id in leaving:
        error = (ErrorCode.UNKNOWN_MEMBER_ID if group is None else
                 group.leave(member_id=member_id, instance_id=instance_id, now_ms=now_ms))
        results.append(leave_group.MemberResponse(member_id=member_id,
                                                  group_instance_id=instance_id,
                                                  error_code=int(error)))
    top = 0 if batched else results[0].error_code  # v3 reports per member
    return leave_group.Response(throttle_time_ms=0, error_code=top, members=results)
