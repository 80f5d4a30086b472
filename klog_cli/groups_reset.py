"""`klog groups reset-offsets GROUP --topic T --to-...`: move an empty group's committed offsets.

Kafka's rules (kafka-consumer-groups --reset-offsets): only a group without members, since a
member would overwrite the new offsets with its next commit (and the coordinator accepts an
administrator's commit only then); `--to-offset` is clamped to what the log holds; a datetime
after the last record means the log end. The new offsets are a pure function of offsets read
first, so the preview shows exactly what a real run would write, and writes nothing.

As Kafka's tool, it only previews unless told `--execute`: an operator with Kafka's habits
never rewrites a group's offsets by accident. `--dry-run` asks for the preview explicitly
(scripts); with neither flag the preview comes with Kafka's warning on stderr.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.table import Table

from klog.admin import EARLIEST, LATEST
from klog.types import TopicPartition

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 ("2024-05-01T12:00:00", "...+02:00", "...Z") to epoch milliseconds; without
    an offset the time is local, as in Kafka's tool."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date-time (e.g. 2024-05-01T12:00:00+00:00)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return (moment - EPOCH) // timedelta(milliseconds=1)


def add_arguments(parser) -> None:
    parser.add_argument("group")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", nargs="+", metavar="P",
                        help="partition numbers, space or comma separated (default: all)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-datetime", type=parse_datetime_ms, metavar="ISO",
                        help="the first record at or after this time")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--execute", action="store_true",
                        help="write the new offsets (without it: only show them)")
    action.add_argument("--dry-run", action="store_true",
                        help="show the plan, change nothing (the default)")


def new_offset(args, earliest: int, latest: int, at_time: int | None) -> int:
    """Where a partition goes: ``at_time`` is ListOffsets' answer for --to-datetime (-1 or
    None when no record is that recent)."""
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        return min(max(args.to_offset, earliest), latest)
    return latest if at_time is None or at_time < 0 else at_time


def _partitions(requested: list[str] | None, existing: dict[int, int], topic: str) -> list[int]:
    if requested is None:
        return sorted(existing)
    numbers = sorted({int(p) for item in requested for p in item.split(",") if p.strip()})
    missing = [p for p in numbers if p not in existing]
    if missing:
        raise ValueError(f"topic {topic!r} has no partition {missing[0]} "
                         f"(it has {len(existing)})")
    return numbers


def run(admin, args) -> int:
    group = admin.describe_groups([args.group])[args.group]
    if group.members:
        raise ValueError(f"group {args.group!r} has {len(group.members)} member(s) (state "
                         f"{group.state}); stop its consumers before resetting its offsets")
    earliest = admin.list_offsets(args.topic, EARLIEST)
    latest = admin.list_offsets(args.topic, LATEST)
    at_time = {} if args.to_datetime is None else admin.list_offsets(args.topic,
                                                                      args.to_datetime)
    partitions = [TopicPartition(args.topic, p)
                  for p in _partitions(args.partitions, latest, args.topic)]
    current = admin.list_group_offsets(args.group, partitions)
    changes = {tp: (current.get(tp), new_offset(args, earliest[tp.partition],
                                                latest[tp.partition], at_time.get(tp.partition)))
               for tp in partitions}
    if args.execute:
        admin.alter_group_offsets(args.group, {tp: new for tp, (_, new) in changes.items()})
    elif not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing. "
              "Add --dry-run to preview without this warning, --execute to write.",
              file=sys.stderr)
    verb = "moved" if args.execute else "would move (dry run, nothing changed)"
    table = Table(title=f"group {args.group}: offsets {verb}")
    for column in ("topic", "partition", "old", "new"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for tp, (old, new) in changes.items():
        table.add_row(tp.topic, str(tp.partition), "-" if old is None else str(old), str(new))
    Console(width=None if sys.stdout.isatty() else 160, markup=False).print(table)
    return 0
