"""AlterClientQuotas v0-1 (KIP-546): set or remove quota values of user and client-id
entities. Needs ALTER_CONFIGS on the cluster with an authorizer. Each entry is checked alone
(`client_quotas.entities`: unknown entity types, unknown keys, negative or fractional byte
rates are INVALID_REQUEST, as Kafka answers) and stored alone (the dynamic config store:
/config/users, /config/clients, /config/users/<user>/clients), unless `validate_only`; an
entry refused changes nothing."""

from __future__ import annotations

import logging

from appliance.client_quotas.entities import QuotaError, apply_ops, check_entity, check_op
from appliance.client_quotas.store import QuotaStoreError
from appliance.security.acls import Operation
from appliance.workers import access
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import alter_client_quotas as api
from klog.protocol.error_codes import ErrorCode

API_KEY = api.SPEC.key
log = logging.getLogger(__name__)


def _result(entry, code=ErrorCode.NONE, message=None):
    return api.ResponseEntry(error_code=int(code), error_message=message, entity=[
        api.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
        for e in entry.entity])


def _checked(entry, seen):
    ent = check_entity([(e.entity_type, e.entity_name) for e in entry.entity])
    for op in entry.ops:
        check_op(op.key, op.value, op.remove)
    if ent in seen:
        raise QuotaError(ErrorCode.INVALID_REQUEST, "The entity appears twice in the request")
    return ent


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.ALTER_CONFIGS):
        return api.error_response(body, request.header.api_version,
                                  ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  "Cluster authorization failed.")
    store = worker.quotas.store
    results = []
    seen = set()
    for entry in body.entries:
        try:
            ent = _checked(entry, seen)
        except QuotaError as exc:
            results.append(_result(entry, exc.code, str(exc)))
            continue
        seen.add(ent)
        if body.validate_only:
            results.append(_result(entry))
            continue
        values = apply_ops(store.quotas().get(ent, {}),
                           [(op.key, op.value, op.remove) for op in entry.ops])
        try:
            store.alter({ent: values})
        except QuotaStoreError as exc:
            log.error("cannot store the client quotas of %s: %s", ent, exc)
            results.append(_result(entry, exc.code, str(exc)))
            continue
        results.append(_result(entry))
    worker.quotas.tick(0.0)
    return api.Response(throttle_time_ms=0, entries=results)
