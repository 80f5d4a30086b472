"""The consumer-lag report file: where each coordinator leaves it, and how anyone reads it.

Public for the command (`klog status`), which reads it without a network call; the group
coordinator in each worker writes it (`appliance.workers.groups.lag`). The file is JSON:
`{"updated_ms": ..., "groups": [{"group", "state", "members", "lag", "partitions": [...]}]}`.
"""

from __future__ import annotations

from pathlib import Path

import orjson

REPORT_NAME = ".klog-groups.json"


def report_path(log_dir: Path) -> Path:
    return Path(log_dir) / REPORT_NAME


def read_lag_report(log_dir: Path) -> dict | None:
    """The report the coordinator of `log_dir` left, or None (none yet, or unreadable)."""
    try:
        return orjson.loads(report_path(log_dir).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
