"""CreateAcls v0-3: one result per creation, in order. Needs ALTER on the cluster; an ACL
Kafka would not store answers INVALID_REQUEST with the reason; the valid ones go to the
supervisor, which writes them and tells every worker before it replies."""

from __future__ import annotations

from appliance.security.acls import Operation, binding, invalid_reason
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from appliance.workers.handlers.describe_acls import NO_AUTHORIZER
from klog.protocol.apis import create_acls
from klog.protocol.error_codes import ErrorCode

API_KEY = create_acls.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    if worker.authorizer is None:
        return create_acls.error_response(body, 0, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    if not access.on_cluster(worker, request, Operation.ALTER):
        return create_acls.error_response(body, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    acls = [binding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                    c.host, c.operation, c.permission_type) for c in body.creations]
    problems = [invalid_reason(acl) for acl in acls]
    valid = [acl for acl, problem in zip(acls, problems, strict=True) if problem is None]
    error, message = (worker.control.create_acls(valid) if valid
                      else (ErrorCode.NONE, None))
    return create_acls.Response(throttle_time_ms=0, results=[
        create_acls.AclCreationResult(error_code=int(ErrorCode.INVALID_REQUEST),
                                      error_message=problem) if problem else
        create_acls.AclCreationResult(error_code=int(error), error_message=message)
        for problem in problems])
