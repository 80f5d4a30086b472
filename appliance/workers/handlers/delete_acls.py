"""DeleteAcls v0-3: each filter's result lists the ACLs it removed (an ACL two filters match
is listed under both, as Kafka does). Needs ALTER on the cluster; removal happens at the
supervisor, which writes the file and tells every worker before it replies."""

from __future__ import annotations

from appliance.security.acls import Operation, filter_of
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.handlers.describe_acls import NO_AUTHORIZER
from klog.protocol.apis import delete_acls
from klog.protocol.error_codes import ErrorCode

API_KEY = delete_acls.SPEC.key


def _matching(acl):
    return delete_acls.DeleteAclsMatchingAcl(
        error_code=0, error_message=None, resource_type=int(acl.resource_type),
        resource_name=acl.resource_name, pattern_type=int(acl.pattern_type),
        principal=acl.principal, host=acl.host, operation=int(acl.operation),
        permission_type=int(acl.permission))


def handle(worker: HandlerContext, request):
    body = request.body
    if worker.authorizer is None:
        return delete_acls.error_response(body, 0, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not access.on_cluster(worker, request, Operation.ALTER):
        return delete_acls.error_response(body, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    filters = [filter_of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                         f.principal_filter, f.host_filter, f.operation, f.permission_type)
               for f in body.filters]
    problems = [f.invalid_reason() for f in filters]
    valid = [f for f, problem in zip(filters, problems, strict=True) if problem is None]
    error, message, removed = (worker.control.delete_acls(valid) if valid
                               else (ErrorCode.NONE, None, ()))
    results = []
    for f, problem in zip(filters, problems, strict=True):
        if problem:
            results.append(delete_acls.DeleteAclsFilterResult(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message=problem,
                matching_acls=[]))
        else:
            results.append(delete_acls.DeleteAclsFilterResult(
                error_code=int(error), error_message=message,
                matching_acls=[_matching(a) for a in removed if f.matches(a)]))
    return delete_acls.Response(throttle_time_ms=0, filter_results=results)
