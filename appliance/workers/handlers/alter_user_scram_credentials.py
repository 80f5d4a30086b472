"""AlterUserScramCredentials v0 (KIP-554): one result per user. Needs ALTER on the cluster
with an authorizer. The checks are `appliance.scram_alterations`; what passes goes to the
supervisor, which writes the appliance's file (alone) or ZooKeeper (a fleet) and tells every
worker before it replies."""

from __future__ import annotations

from appliance import scram_alterations
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import alter_user_scram_credentials as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.ALTER):
        return api.error_response(body, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  "Cluster authorization failed.")
    outcome = scram_alterations.plan(body.deletions, body.upsertions,
                                     worker.scram_credentials.users())
    error, message = ErrorCode.NONE, None
    if outcome.changes:
        error, message = worker.control.alter_scram(outcome.changes)
    changed = {c.user for c in outcome.changes}
    return api.Response(throttle_time_ms=0, results=[
        api.AlterUserScramCredentialsResult(
            user=name, error_code=int(error if name in changed else code),
            error_message=message if name in changed else text)
        for name, (code, text) in outcome.errors.items()])
