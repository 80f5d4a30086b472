"""The consumer-lag report: how anyone reads what each coordinator published.

Public for the command (`klog status`) and the supervisor's metrics, which read it without a
network call: the group coordinator in each worker computes it (`appliance.workers.groups.lag`)
every second and the worker publishes it in its shm metrics area
(`appliance.shm.metrics_area`), under the key ``lag``:
`{"updated_ms": ..., "groups": [{"group", "state", "members", "lag", "partitions": [...]}]}`.
Until release 2 of the region layout it was a JSON file beside each log dir.
"""

from __future__ import annotations


def read_lag_report(region, worker: int) -> dict | None:
    """The report worker `worker` published last, or None (none yet, or unreadable)."""
    published = region.metrics.read(worker)
    if published is None:
        return None
    return published[2].get("lag")
