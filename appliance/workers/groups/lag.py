"""Consumer lag as the appliance sees it: per group and partition, the log end minus the
committed offset. The coordinator has both numbers, so it computes lag itself and leaves the
result beside its log dir (`appliance.lag_report` says where and how it is read), where
``klog status`` reads it without a network round trip (as it reads everything else from the
shared-memory region)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import orjson


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
    """Writes the report file (atomically: write, then rename) when there is something to
    say, and once more to clear it when the last group is gone."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._written = self.path.exists()  # an earlier run's report is cleared at once

    def write(self, groups: Iterable, offsets: dict, high_watermark_of, now_ms: int) -> None:
        rows = [group_lag(g.group_id, g.state.value, len(g.members), offsets.get(g.group_id, {}),
                          high_watermark_of)
                for g in sorted(groups, key=lambda g: g.group_id)
                if g.state.value != "Dead"]
        if not rows and not self._written:
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            temporary.write_bytes(orjson.dumps({"updated_ms": now_ms, "groups": rows}))
            os.replace(temporary, self.path)
        except OSError:
            return  # a report, not data: a read-only or full disk must not stop the worker
        self._written = bool(rows)
