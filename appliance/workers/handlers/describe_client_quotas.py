"""DescribeClientQuotas v0-1 (KIP-546): the stored entities that match the filter, with their
values. Needs DESCRIBE_CONFIGS on the cluster with an authorizer. A bad filter (an unknown
entity type or match type, a type twice, ip beside user or client-id) is INVALID_REQUEST, as
Kafka answers."""

from __future__ import annotations

from appliance.client_quotas.entities import Component, QuotaError, check_filter, matches
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import describe_client_quotas as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    version = request.header.api_version
    if not access.on_cluster(worker, request, Operation.DESCRIBE_CONFIGS):
        return api.error_response(body, version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  "Cluster authorization failed.")
    components = [Component(c.entity_type, c.match_type, c.match) for c in body.components]
    try:
        check_filter(components)
    except QuotaError as exc:
        return api.error_response(body, version, exc.code, str(exc))
    store = worker.quotas.store
    entries = [
        api.EntryData(
            entity=[api.EntityData(entity_type=t, entity_name=n) for t, n in ent],
            values=[api.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        for ent, values in sorted(store.quotas().items(), key=str)
        if values and matches(ent, components, body.strict)]
    return api.Response(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
