"""Reading the warehouse back in the pipeline tests."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import orjson

from klog_pipeline.hours import Hour


def rows_by_hour(spark, path: Path) -> dict[Hour, list[dict]]:
    """The rows of a table partitioned by dt/hour, per hour (empty if nothing is published)."""
    if not path.exists() or not any(path.glob("dt=*/hour=*/*.parquet")):
        return {}
    out: dict[Hour, list[dict]] = defaultdict(list)
    for row in spark.read.parquet(str(path)).collect():
        out[Hour.parse(f"{row.dt}T{row.hour:02d}")].append(row.asDict())
    return dict(out)


def ledger(warehouse: Path, topic: str) -> dict:
    path = warehouse / "_ledger" / f"{topic}.json"
    return orjson.loads(path.read_bytes()) if path.exists() else {"hours": {}}


def snapshot(warehouse: Path) -> dict[str, tuple[int, int]]:
    """Every file under the warehouse (but the lock) with its size and mtime."""
    return {str(p.relative_to(warehouse)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(warehouse.rglob("*")) if p.is_file() and p.suffix != ".lock"}
