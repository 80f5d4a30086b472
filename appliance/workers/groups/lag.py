"""Consumer lag as the appliance sees it: per group and partition, the log end minus the
committed offset. The coordinator has both numbers, so it computes lag itself and keeps the
latest report, which the worker publishes in its shm metrics area (`appliance.lag_report`
says how it is read): ``klog status`` and the metrics scrape read it without a network round
trip, as they read everything else from the shared-memory region."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def group_lag(group_id: str, state: str, members: int, committed: dict,
              high_watermark_of: Callable[[str, int], int | None]) -> dict:
    partitions = []
    for (topic, partition), value in sorted(committed.items()):
        end = high_watermark_of(topic, partition)
        partitions.append({
            "topic": topic, "partition": partition, "committed": value.offset,
            "log_end": end, "lag": None if end is None else max(0, end - value.offset)})
    known = [p["lag"] for p in partitions if p["lag"] is not None]
    return {"group": group_id, "state": state, "members": members,
            "lag": sum(known), "partitions": partitions}


class LagReport:
    """The latest report: ``{"updated_ms", "groups": [...]}``, None before the first."""

    def __init__(self):
        self.latest: dict | None = None

    def write(self, groups: Iterable, offsets: dict, high_watermark_of, now_ms: int) -> None:
        rows = [group_lag(g.group_id, g.state.value, len(g.members), offsets.get(g.group_id, {}),
                          high_watermark_of)
                for g in sorted(groups, key=lambda g: g.group_id)
                if g.state.value != "Dead"]
        self.latest = {"updated_ms": now_ms, "groups": rows}
