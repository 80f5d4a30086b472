"""JoinGroup v1-5: held until the join phase ends (see ``groups.group``); v4+ members are
asked to rejoin with the id they are given (KIP-394), v5 brings static membership."""

from __future__ import annotations

import asyncio

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.group import JoinResult
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import join_group
from klog.protocol.error_codes import ErrorCode

API_KEY = join_group.SPEC.key
KNOWN_MEMBER_ID_VERSION = 4


def _response(result: JoinResult):
    return join_group.Response(
        throttle_time_ms=0, error_code=int(result.error), generation_id=result.generation,
        protocol_name=result.protocol, leader=result.leader, member_id=result.member_id,
        members=[join_group.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=d)
                 for m, i, d in result.members])


def handle(worker: HandlerContext, request):
    body = request.body
    coordinator = worker.groups
    if not access.on_group(worker, request, Operation.READ, body.group_id):
        return _response(JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=body.member_id))
    rebalance_timeout = body.rebalance_timeout_ms
    if rebalance_timeout < 0:
        rebalance_timeout = body.session_timeout_ms
    try:
        coordinator.check_session_timeout(body.session_timeout_ms)
        group = coordinator.group(body.group_id, create=True)
    except CoordinatorError as exc:
        return _response(JoinResult(exc.code, member_id=body.member_id))
    answer = asyncio.get_running_loop().create_future()

    def respond(result: JoinResult) -> None:
        if not answer.done():
            answer.set_result(_response(result))

    group.join(member_id=body.member_id, instance_id=body.group_instance_id,
               client_id=request.header.client_id or "", client_host=request.client_host,
               session_timeout_ms=body.session_timeout_ms,
               rebalance_timeout_ms=rebalance_timeout, protocol_type=body.protocol_type,
               protocols=[(p.name, p.metadata) for p in body.protocols],
               require_known_member_id=request.header.api_version >= KNOWN_MEMBER_ID_VERSION,
               respond=respond, now_ms=worker.now_ms())
    return answer if not answer.done() else answer.result()

