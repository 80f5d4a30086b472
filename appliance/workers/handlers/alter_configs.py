"""AlterConfigs v0-2: replace each resource's dynamic configs (the checks and the work are
`appliance.workers.config_alterations`)."""

from __future__ import annotations

from appliance.workers.config_alterations import alter_all
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import alter_configs as api

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    body = request.body
    outcomes = alter_all(worker, request, body.resources, incremental=False,
                         validate_only=body.validate_only)
    return api.Response(throttle_time_ms=0, responses=[
        api.AlterConfigsResourceResponse(error_code=int(error), error_message=message,
                                         resource_type=r.resource_type,
                                         resource_name=r.resource_name)
        for r, (error, message) in zip(body.resources, outcomes, strict=True)])
