"""DeleteGroups v0-1: remove empty groups with their committed offsets (tombstones in
``__consumer_offsets``); a group with members answers NON_EMPTY_GROUP."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import delete_groups

API_KEY = delete_groups.SPEC.key


async def _delete_all(worker, names):
    results = []
    for name in names:
        error = await worker.groups.delete(name)
        results.append(delete_groups.DeletableGroupResult(group_id=name, error_code=int(error)))
    return delete_groups.Response(throttle_time_ms=0, results=results)


def handle(worker: HandlerContext, request):
    return _delete_all(worker, request.body.groups_names)
