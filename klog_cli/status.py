"""`klog status --config FILE`: a running appliance, read from its shared-memory region.

No network call: the region's name follows from the config, and everything shown (workers,
liveness, restarts, partitions, offsets, sizes, rates) is what the supervisor and the workers
publish there. Rates are the difference of two snapshots `--interval` seconds apart; messages
out are estimated from bytes out and the partition's bytes per message in, because workers
serve batches without counting the records inside them. Consumer groups and their lag come
from the reports the coordinating workers publish in their shm metrics areas
(klog_cli/status_groups.py). Each partition's last stable offset (LSO) is in the shm index
beside its high watermark; a partition whose LSO is below its high watermark has an open
transaction, which holds read_committed consumers at the LSO: those are the "open
transactions" table (`klog transactions list --open` names their transactional ids).
"""

from __future__ import annotations

import sys
import time

import orjson
from rich.console import Console
from rich.table import Table

from appliance.config import ConfigError, load_config
from appliance.shm.appliance_region import ApplianceRegion
from appliance.shm.region import RegionError
from appliance.shm.status import rates
from klog_cli.status_groups import groups_tables, read_groups


def add_arguments(parser) -> None:
    parser.add_argument("--config", "-c", required=True, help="the appliance's config file")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between the two snapshots that rates come from")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also the lag of every partition of every consumer group")


def run(args) -> int:
    try:
        config = load_config(args.config, args.override)
        region = ApplianceRegion.open_status(config)
    except (ConfigError, RegionError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    try:
        before = region.snapshot()
        time.sleep(max(args.interval, 0.0))
        after = region.snapshot()
        groups = read_groups(region, after.workers)
    finally:
        region.close()
    per_second = rates(before, after)
    if args.json:
        document = after.to_dict()
        for partition in document["partitions"]:
            key = (partition["topic"], partition["partition"])
            partition["rates"] = per_second.get(key, {})
        document["groups"] = groups
        document["open_transactions"] = open_transactions(after)
        sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    _print(after, per_second, groups_tables(groups, verbose=args.verbose))
    return 0


def _print(snapshot, per_second, group_tables) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    now = snapshot.taken_at_ms
    workers = Table(title=f"klog appliance (supervisor pid {snapshot.header.supervisor_pid})")
    for column in ("worker", "pid", "port", "disk", "state", "heartbeat", "restarts"):
        workers.add_column(column)
    for w in snapshot.workers:
        age_ms = w.heartbeat_age_ms(now)
        workers.add_row(str(w.index), str(w.pid or "-"), str(w.port), w.log_dir, w.state.name,
                        f"{age_ms / 1000:.1f}s ago" if age_ms >= 0 else "-", str(w.restarts))
    console.print(workers)
    partitions = Table(title=f"{len(snapshot.partitions)} partition(s)")
    for column in ("topic", "partition", "owner", "log start", "high watermark", "LSO",
                   "bytes", "msgs in/s", "msgs out/s (est.)"):
        partitions.add_column(column, justify="right" if column != "topic" else "left")
    for p in snapshot.partitions:
        if p.view is None:
            partitions.add_row(p.topic, str(p.partition), "?", "torn", "", "", "", "", "")
            continue
        rate = per_second.get((p.topic, p.partition), {})
        per_record = p.view.bytes_in / p.view.records_in if p.view.records_in else 0
        out = rate.get("bytes_out_per_s", 0) / per_record if per_record else 0
        partitions.add_row(p.topic, str(p.partition), str(p.owner), str(p.view.log_start_offset),
                           str(p.view.high_watermark), str(p.view.last_stable_offset),
                           f"{p.view.size_bytes:,}",
                           f"{rate.get('records_in_per_s', 0):,.0f}", f"{out:,.0f}")
    console.print(partitions)
    held = open_transactions(snapshot)
    if held:
        table = Table(title=f"Open transactions ({len(held)} partition(s) held back)")
        for column in ("topic", "partition", "LSO", "high watermark", "held back (offsets)"):
            table.add_column(column, justify="right" if column != "topic" else "left")
        for row in held:
            table.add_row(row["topic"], str(row["partition"]), str(row["last_stable_offset"]),
                          str(row["high_watermark"]), str(row["held_back"]))
        console.print(table)
    for table in group_tables:
        console.print(table)
    for problem in snapshot.problems:
        console.print(f"[yellow]problem:[/] {problem}")


def open_transactions(snapshot) -> list[dict]:
    """The partitions an open transaction holds back: LSO below the high watermark."""
    return [{"topic": p.topic, "partition": p.partition,
             "last_stable_offset": p.view.last_stable_offset,
             "high_watermark": p.view.high_watermark,
             "held_back": p.view.high_watermark - p.view.last_stable_offset}
            for p in snapshot.partitions
            if p.view is not None and 0 <= p.view.last_stable_offset < p.view.high_watermark]
