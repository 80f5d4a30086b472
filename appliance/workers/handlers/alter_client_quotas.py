"""AlterClientQuotas v0-1 (KIP-546): set or remove quota values of user and client-id
entities. Needs ALTER_CONFIGS on the cluster with an authorizer. Each entry is checked alone
(`client_quotas.entities`: unknown entity types, unknown keys, negative or fractional byte
rates are INVALID_REQUEST, as Kafka answers); the entries that pass are stored together
unless `validate_only`, and an entry refused changes nothing."""

from __future__ import annotations

import logging

from appliance.client_quotas.entities import QuotaError, apply_ops, check_entity, check_op
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


def handle(worker: HandlerContext, request):
    body = request.body
    if not access.on_cluster(worker, request, Operation.ALTER_CONFIGS):
        return api.error_response(body, request.header.api_version,
                                  ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  "Cluster authorization failed.")
    store = worker.quotas.store
    if hasattr(store, "force_refresh"):
        store.force_refresh()
    current = store.quotas()
    results = []
    changes = {}
    accepted = []  # indexes of the entries stored
    for entry in body.entries:
        try:
            ent = check_entity([(e.entity_type, e.entity_name) for e in entry.entity])
            for op in entry.ops:
                check_op(op.key, op.value, op.remove)
            if ent in changes:
                raise QuotaError(ErrorCode.INVALID_REQUEST,
                                 "The entity appears twice in the request")
        except QuotaError as exc:
            results.append(_result(entry, exc.code, str(exc)))
            continue
        changes[ent] = apply_ops(current.get(ent, {}),
                                 [(op.key, op.value, op.remove) for op in entry.ops])
        accepted.append(len(results))
        results.append(_result(entry))
    if changes and not body.validate_only:
        try:
            store.alter(changes)
        except OSError as exc:
            log.error("cannot store client quotas: %s", exc)
            for i in accepted:
                results[i].error_code = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                results[i].error_message = str(exc)
        worker.quotas.tick(0.0)
    return api.Response(throttle_time_ms=0, entries=results)
