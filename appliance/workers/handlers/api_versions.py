"""ApiVersions: the advertised ranges, from the one table that also feeds dispatch, and (v3+)
klog's feature saying how node ids map to appliances."""

from __future__ import annotations

from appliance.identity import NODES_PER_APPLIANCE
from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import API_BY_KEY, api_versions
from klog.protocol.apis.api_versions import APPLIANCE_FEATURE

API_KEY = api_versions.SPEC.key


def advertised_versions(handled: set[int]) -> list:
    """Advertise only APIs that this worker has a handler for (DESIGN.md: no promises)."""
    return [
        api_versions.ApiVersion(api_key=spec.key, min_version=spec.advertised[0],
                                max_version=spec.advertised[1])
        for key, spec in sorted(API_BY_KEY.items())
        if key in handled
    ]


# v3+: klog's client learns here that node ids are broker.id * 100 + worker index, and so which
# workers share an appliance (its reads spread over them; klog/metadata.py)
APPLIANCE = [api_versions.SupportedFeatureKey(name=APPLIANCE_FEATURE,
                                              min_version=NODES_PER_APPLIANCE,
                                              max_version=NODES_PER_APPLIANCE)]


def handle(worker: HandlerContext, request):
    return api_versions.Response(error_code=0, api_keys=worker.advertised_api_versions,
                                 throttle_time_ms=0, supported_features=APPLIANCE)
