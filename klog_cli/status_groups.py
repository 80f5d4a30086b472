"""The "Consumer groups" part of `klog status`: the lag reports the coordinators leave.

Each worker that coordinates groups publishes its lag report in its shm metrics area every
second (`appliance.lag_report`), so status needs no network call here either. A report
older than its worker's current incarnation was left by an earlier one (a restart, or a
previous run of the appliance) and is ignored: the live worker rewrites it within a second if
it still coordinates those groups. When two reports name the same group (it moved between
workers), the newer wins.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from appliance.lag_report import read_lag_report


def read_groups(region, workers) -> list[dict]:
    """Every group of every worker's current report, each with the coordinating worker's
    index and the report's time, sorted by group id."""
    newest: dict[str, dict] = {}
    for w in workers:
        report = read_lag_report(region, w.index)
        if not report or report.get("updated_ms", 0) < w.started_at_ms:
            continue
        for group in report.get("groups", []):
            row = {**group, "coordinator": w.index, "updated_ms": report["updated_ms"]}
            known = newest.get(row["group"])
            if known is None or known["updated_ms"] < row["updated_ms"]:
                newest[row["group"]] = row
    return [newest[name] for name in sorted(newest)]


def groups_tables(groups: list[dict], *, verbose: bool) -> list[Table]:
    """The groups table, and with ``verbose`` one of their partitions; nothing without
    groups."""
    if not groups:
        return []
    summary = Table(title=f"Consumer groups ({len(groups)})")
    for column in ("group", "state", "members", "total lag", "coordinator"):
        summary.add_column(column, justify="left" if column in ("group", "state") else "right")
    for g in groups:
        summary.add_row(escape(g["group"]), g["state"], str(g["members"]), f"{g['lag']:,}",
                        f"worker {g['coordinator']}")
    if not verbose:
        return [summary]
    partitions = Table(title="Consumer group partitions")
    for column in ("group", "topic", "partition", "committed", "log end", "lag"):
        partitions.add_column(column, justify="left" if column in ("group", "topic")
                              else "right")
    for g in groups:
        for p in g["partitions"]:
            partitions.add_row(escape(g["group"]), p["topic"], str(p["partition"]),
                               str(p["committed"]), _text(p["log_end"]), _text(p["lag"]))
    return [summary, partitions]


def _text(value) -> str:
    return "-" if value is None else f"{value:,}"
