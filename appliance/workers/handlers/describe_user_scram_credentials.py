"""DescribeUserScramCredentials v0 (KIP-554): each user's mechanisms and iteration counts,
from the worker's own view of the users (alone the appliance's file, in a fleet what the
supervisor read in ZooKeeper). Needs DESCRIBE on the cluster with an authorizer."""

from __future__ import annotations

from appliance.scram_alterations import TYPE_BY_MECHANISM
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_user_scram_credentials as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.DESCRIBE):
        return api.error_response(body, 0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  "Cluster authorization failed.")
    users = worker.scram_credentials.users()
    asked = [u.name for u in body.users or ()]
    names = asked or sorted(users)
    results, seen = [], set()
    for name in names:
        if name in seen:
            continue
        if asked.count(name) > 1:
            results.append(api.DescribeUserScramCredentialsResult(
                user=name, error_code=int(ErrorCode.DUPLICATE_RESOURCE),
                error_message="Cannot describe SCRAM credentials for the same user twice in "
                              f"a single request: {name}", credential_infos=[]))
        elif name not in users:
            results.append(api.DescribeUserScramCredentialsResult(
                user=name, error_code=int(ErrorCode.RESOURCE_NOT_FOUND),
                error_message=f"Attempt to describe a user credential that does not exist: "
                              f"{name}", credential_infos=[]))
        else:
            results.append(api.DescribeUserScramCredentialsResult(
                user=name, error_code=0, error_message=None, credential_infos=[
                    api.CredentialInfo(mechanism=TYPE_BY_MECHANISM[m], iterations=c.iterations)
                    for m, c in sorted(users[name].items())]))
        seen.add(name)
    return api.Response(throttle_time_ms=0, error_code=0, error_message=None, results=results)
