"""DescribeGroups v0-4: state, protocol and members (with their subscription and assignment
bytes) of groups this worker coordinates; a group nobody knows is reported as Dead, as Kafka
does."""

from __future__ import annotations

from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.groups.coordinator import CoordinatorError
from appliance.workers.groups.state import GroupState
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_groups
from klog.protocol.error_codes import ErrorCode

API_KEY = describe_groups.SPEC.key
NO_OPERATIONS = access.NOT_ASKED


def _describe(worker, request, group_id: str):
    try:
        if not access.on_group(worker, request, Operation.DESCRIBE, group_id):
            raise CoordinatorError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized")
        group = worker.groups.group(group_id, create=False)
    except CoordinatorError as exc:
        return describe_groups.DescribedGroup(
            error_code=int(exc.code), group_id=group_id, group_state="", protocol_type="",
            protocol_data="", members=[], authorized_operations=NO_OPERATIONS)
    if group is None:
        return describe_groups.DescribedGroup(
            error_code=0, group_id=group_id, group_state=GroupState.DEAD.value,
            protocol_type="", protocol_data="", members=[], authorized_operations=NO_OPERATIONS)
    show_assignment = group.state is GroupState.STABLE
    members = [describe_groups.DescribedGroupMember(
        member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
        client_host=m.client_host, member_metadata=m.metadata_for(group.protocol or ""),
        member_assignment=m.assignment if show_assignment else b"")
        for m in group.members.values()]
    operations = NO_OPERATIONS
    if getattr(request.body, "include_authorized_operations", False):
        operations = access.authorized_operations(worker, request, access.GROUP, group_id)
    return describe_groups.DescribedGroup(
        error_code=int(ErrorCode.NONE), group_id=group_id, group_state=group.state.value,
        protocol_type=group.protocol_type or "", protocol_data=group.protocol or "",
        members=members, authorized_operations=operations)


def handle(worker: HandlerContext, request):
    return describe_groups.Response(
        throttle_time_ms=0, groups=[_describe(worker, request, g) for g in request.body.groups])
