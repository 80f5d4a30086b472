"""IncrementalAlterConfigs v0-1 (KIP-339): set, delete, append to or subtract from named
keys (the checks and the work are `appliance.workers.config_alterations`)."""

from __future__ import annotations

from appliance.workers.config_alterations import alter_all
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import incremental_alter_configs as api

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    outcomes = alter_all(worker, request, body.resources, incremental=True,
                         validate_only=body.validate_only)
    return api.Response(throttle_time_ms=0, responses=[
        api.AlterConfigsResourceResponse(error_code=int(error), error_message=message,
                                         resource_type=r.resource_type,
                                         resource_name=r.resource_name)
        for r, (error, message) in zip(body.resources, outcomes, strict=True)])
