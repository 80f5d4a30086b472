"""ApiVersions: the advertised ranges, from the one table that also feeds dispatch."""

from __future__ import annotations

from appliance.workers.handler_context import HandlerContext
from klog.protocol.apis import API_BY_KEY, api_versions

API_KEY = api_versions.SPEC.key


def advertised_versions(handled: set[int]) -> list:
    """Advertise only APIs that this worker has a handler for (DESIGN.md: no promises)."""
    return [
        api_versions.ApiVersion(api_key=spec.key, min_version=spec.advertised[0],
                                max_version=spec.advertised[1])
        for key, spec in sorted(API_BY_KEY.items())
        if key in handled
    ]


def handle(worker: HandlerContext, request):
    return api_versions.Response(error_code=0, api_keys=worker.advertised_api_versions,
                                 throttle_time_ms=0)
