"""AlterConfigs v0-2: replace each resource's dynamic configs (the checks and the work are
`appliance.workers.config_alterations`)."""

from __future__ import annotations

from appliance.workers.config_alterations import answer
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import alter_configs as api

API_KEY = api.SPEC.key


def handle(worker: HandlerContext, request):
    return answer(worker, request, api, incremental=False)
