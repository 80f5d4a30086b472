"""SyncGroup v0-3: the leader hands in the assignment; every member gets its own part."""

from __future__ import annotations

import asyncio

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.group import SyncResult
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import sync_group
from klog.protocol.error_codes import ErrorCode

API_KEY = sync_group.SPEC.key


def _response(result: SyncResult):
    return sync_group.Response(throttle_time_ms=0, error_code=int(result.error),
                               assignment=result.assignment)


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return _response(SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    try:
        group = worker.groups.group(body.group_id, create=False)
    except CoordinatorError as exc:
        return _response(SyncResult(exc.code))
    if group is None:
        return _response(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
    answer = asyncio.get_running_loop().create_future()

    def respond(result: SyncResult) -> None:
        if not answer.done():
            answer.set_result(_response(result))

    group.sync(member_id=body.member_id, instance_id=body.group_instance_id,
               generation=body.generation_id,
               assignments={a.member_id: a.assignment for a in body.assignments},
               respond=respond, now_ms=worker.now_ms())
    return answer if not answer.done() else answer.result()
