"""`klog status --config FILE`: a running appliance, read from its shared-memory region.

No network call: the region's name follows from the config, and everything shown (workers,
liveness, restarts, partitions, offsets, sizes, rates) is what the supervisor and the workers
publish there. Rates are the difference of two snapshots `--interval` seconds apart; messages
out are estimated from bytes out and the partition's bytes per message in, because workers
serve batches without counting the records inside them. Consumer groups and their lag come
from the reports the coordinating workers publish in their shm metrics areas
(klog_cli/status_groups.py).
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
    for column in ("topic", "partition", "owner", "log start", "high watermark", "bytes",
                   "msgs in/s", "msgs out/s (est.)"):
        partitions.add_column(column, justify="right" if column != "topic" else "left")
    for p in snapshot.partitions:
        if p.view is None:
            partitions.add_row(p.topic, str(p.partition), "?", "torn", "", "", "", "")
            continue
        rate = per_second.get((p.topic, p.partition), {})
        per_record = p.view.bytes_in / p.view.records_in if p.view.records_in else 0
        out = rate.get("bytes_out_per_s", 0) / per_record if per_record else 0
        partitions.add_row(p.topic, str(p.partition), str(p.owner), str(p.view.log_start_offset),
                           str(p.view.high_watermark), f"{p.view.size_bytes:,}",
                           f"{rate.get('records_in_per_s', 0):,.0f}", f"{out:,.0f}")
    console.print(partitions)
    for table in group_tables:
        console.print(table)
    for problem in snapshot.problems:
        console.print(f"[yellow]problem:[/] {problem}")
