"""The hourly loader's command line, shared by ``klog load-hourly`` and the spark-submit job
file (`klog_pipeline.job`), so both take the same options and behave the same.

Exit status: 0 when every hour asked for is loaded, already loaded or empty; 1 when one was
refused (not complete, gap or overlap) or failed; 2 for a usage error (argparse).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console

from klog_pipeline.hours import Hour, parse_moment_ms


def hour(text: str) -> Hour:
    try:
        return Hour.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def moment(text: str) -> int:
    try:
        return parse_moment_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser, *, with_master: bool = True) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    parser.add_argument("--topic", "-t", required=True)
    parser.add_argument("--warehouse", "-w", required=True, type=Path,
                        help="warehouse root: a directory every Spark executor can write")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--hour", type=hour, help="the UTC hour to load, e.g. 2026-11-21T13")
    which.add_argument("--catch-up", action="store_true",
                       help="load every complete hour not loaded yet, oldest first")
    parser.add_argument("--reload", action="store_true",
                        help="replace the hour if it is already loaded")
    parser.add_argument("--allow-gap", action="store_true",
                        help="load even if the hour's offsets do not join its loaded neighbours")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="load an hour that has not ended yet (recorded as incomplete)")
    parser.add_argument("--schema", metavar="DDL",
                        help="event columns, e.g. 'user string, n bigint' (default: the "
                             "ledger's, else inferred from the first load)")
    parser.add_argument("--settle-seconds", type=int, default=60,
                        help="an hour is complete this long after it ends (default 60)")
    parser.add_argument("--min-partitions", type=int, default=0,
                        help="split the hour into at least this many Spark tasks")
    if with_master:
        parser.add_argument("--master", default="local[*]",
                            help="Spark master (default local[*])")
    parser.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                        default="read_uncommitted",
                        help="read_committed: a producer's aborted (and still open) "
                        "transactions never reach the warehouse; an open transaction delays "
                        "the hours it spans (Kafka's default, read_uncommitted, loads "
                        "every record written)")
    parser.add_argument("--now", type=moment, help=argparse.SUPPRESS)  # tests, replays


def settings_from(args):
    from klog_pipeline.loader import LoadSettings

    return LoadSettings(
        bootstrap_servers=args.bootstrap_server, topic=args.topic, warehouse=args.warehouse,
        schema=args.schema, settle_ms=args.settle_seconds * 1000,
        min_partitions=args.min_partitions, allow_gap=args.allow_gap,
        allow_incomplete=args.allow_incomplete, reload=args.reload,
        isolation_level=args.isolation_level)


def run(args, spark=None, console: Console | None = None) -> int:
    """Load what ``args`` ask for on ``spark`` (a new local session on ``args.master`` if
    None, stopped at the end); print the progress and the summary."""
    from klog.errors import KlogError
    from klog_pipeline.ledger import LedgerError
    from klog_pipeline.loader import HourlyLoader
    from klog_pipeline.progress import Reporter

    console = console or Console()
    if args.reload and args.catch_up:
        console.print("klog load-hourly: --reload goes with --hour, not --catch-up")
        return 2
    now_ms = args.now if args.now is not None else int(time.time() * 1000)
    reporter = Reporter(console)
    own_session = spark is None
    if own_session:
        from klog_pipeline.session import open_session

        spark = open_session(args.master, app_name=f"klog load-hourly {args.topic}")
    try:
        with HourlyLoader(spark, settings_from(args), now_ms=now_ms,
                          reporter=reporter) as loader:
            results = loader.catch_up() if args.catch_up else [loader.load(args.hour)]
    except (LedgerError, ValueError, KlogError) as exc:
        console.print(f"klog load-hourly: {exc}", markup=False, soft_wrap=True)
        return 1
    finally:
        if own_session:
            spark.stop()
    reporter.summary(args.topic, args.warehouse, results)
    return 0 if all(r.ok for r in results) else 1
