"""ListGroups v0-2: the groups this worker coordinates (admin tools ask every node)."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import list_groups

API_KEY = list_groups.SPEC.key


def handle(worker: HandlerContext, request):
    return list_groups.Response(throttle_time_ms=0, error_code=0, groups=[
        list_groups.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "")
        for g in worker.groups.listed()
        if access.on_group(worker, request, Operation.DESCRIBE, g.group_id)])
