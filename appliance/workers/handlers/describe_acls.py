"""DescribeAcls v0-3: the ACLs a filter matches, grouped by resource pattern. Needs DESCRIBE
on the cluster; without an authorizer, SECURITY_DISABLED (as Kafka)."""

from __future__ import annotations

from appliance.security.acls import Operation, PatternType, filter_of
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_acls
from klog.protocol.error_codes import ErrorCode

API_KEY = describe_acls.SPEC.key
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _refused(code: ErrorCode, message: str | None = None):
    return describe_acls.error_response(None, 0, int(code), message)


def handle(worker: HandlerContext, request):
    if worker.authorizer is None:
        return _refused(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not access.on_cluster(worker, request, Operation.DESCRIBE):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    b = request.body
    wanted = filter_of(b.resource_type_filter, b.resource_name_filter, b.pattern_type_filter,
                       b.principal_filter, b.host_filter, b.operation, b.permission_type)
    problem = wanted.invalid_reason()
    if problem:
        return _refused(ErrorCode.INVALID_REQUEST, problem)
    v0 = request.header.api_version == 0  # v0 cannot say PREFIXED: those are left out
    resources: dict[tuple, list] = {}
    for acl in sorted(worker.control.acls.acls):
        if not wanted.matches(acl) or (v0 and acl.pattern_type is PatternType.PREFIXED):
            continue
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        resources.setdefault(key, []).append(describe_acls.AclDescription(
            principal=acl.principal, host=acl.host, operation=int(acl.operation),
            permission_type=int(acl.permission)))
    return describe_acls.Response(
        throttle_time_ms=0, error_code=0, error_message=None,
        resources=[describe_acls.DescribeAclsResource(
            resource_type=int(rtype), resource_name=name, pattern_type=int(pattern), acls=acls)
            for (rtype, name, pattern), acls in resources.items()])
