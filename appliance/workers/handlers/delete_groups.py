"""DeleteGroups v0-1: remove empty groups with their committed offsets (tombstones in
``__consumer_offsets``); a group with members answers NON_EMPTY_GROUP."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import delete_groups
from klog.protocol.error_codes import ErrorCode

API_KEY = delete_groups.SPEC.key


async def _delete_all(worker, request, names):
    results = []
    for name in names:
        if not access.on_group(worker, request, Operation.DELETE, name):
            error = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            error = await worker.groups.delete(name)
        results.append(delete_groups.DeletableGroupResult(group_id=name, error_code=int(error)))
    return delete_groups.Response(throttle_time_ms=0, results=results)


def handle(worker: HandlerContext, request):
    return _delete_all(worker, request, request.body.groups_names)
