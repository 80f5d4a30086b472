"""`klog groups list|describe|reset-offsets|delete-offsets|delete` (kafka-consumer-groups).

Everything goes through klog.Admin: ListGroups on every node, DescribeGroups and OffsetFetch
on the group's coordinator, ListOffsets for log ends. Lag is computed here, per partition, as
log end (high watermark) minus committed offset; a partition a member holds but never
committed has no lag to show. `reset-offsets` lives in klog_cli/groups_reset.py.
"""

from __future__ import annotations

import sys

import orjson
from rich.console import Console
from rich.table import Table

from klog.admin import LATEST
from klog.errors import ErrorCode, UnknownTopicOrPartitionError
from klog_cli import groups_delete_offsets, groups_reset
from klog_cli.admin_action import run_action


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every group of every node")
    listing.add_argument("--json", action="store_true")
    describe = actions.add_parser("describe", help="members, committed offsets and lag")
    describe.add_argument("group")
    describe.add_argument("--json", action="store_true")
    groups_reset.add_arguments(actions.add_parser(
        "reset-offsets",
        help="show (or with --execute, make) new committed offsets of an empty group"))
    groups_delete_offsets.add_arguments(actions.add_parser(
        "delete-offsets", help="delete some committed offsets of a group (OffsetDelete)"))
    delete = actions.add_parser("delete", help="delete empty groups and their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")


def run(args) -> int:
    return run_action(args, ACTIONS)


def console() -> Console:
    """Without markup: group, member and client ids are anyone's strings, "[red]" included."""
    width = None if sys.stdout.isatty() else 160
    return Console(width=width, markup=False)


def write_json(document) -> None:
    sys.stdout.buffer.write(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")


def _list(admin, args) -> int:
    listings = admin.list_groups()
    if args.json:
        write_json([{"group": g.group_id, "protocol_type": g.protocol_type,
                     "coordinator": g.coordinator} for g in listings])
        return 0
    table = Table(title=f"{len(listings)} group(s)")
    for column in ("group", "protocol type", "coordinator"):
        table.add_column(column)
    for g in listings:
        table.add_row(g.group_id, g.protocol_type or "-", str(g.coordinator))
    console().print(table)
    return 0


def log_ends(admin, topics) -> dict[tuple[str, int], int]:
    """(topic, partition) -> log end offset; a topic deleted since its commits has none."""
    ends = {}
    for topic in sorted(set(topics)):
        try:
            ends.update({(topic, p): o for p, o in admin.list_offsets(topic, LATEST).items()})
        except UnknownTopicOrPartitionError:
            continue
    return ends


def partition_rows(description, committed: dict, ends: dict) -> list[dict]:
    """One row per partition the group has committed or a member holds, with its lag."""
    holders = {tp: m.member_id for tp, m in description.assigned.items()}
    rows = []
    for tp in sorted(set(committed) | set(holders)):
        offset, end = committed.get(tp), ends.get(tuple(tp))
        lag = None if offset is None or end is None else max(end - offset, 0)
        rows.append({"topic": tp.topic, "partition": tp.partition, "committed": offset,
                     "log_end": end, "lag": lag, "member_id": holders.get(tp)})
    return rows


def _describe(admin, args) -> int:
    description = admin.describe_groups([args.group])[args.group]
    committed = admin.list_group_offsets(args.group)
    if description.state == "Dead" and not committed:
        raise ValueError(f"group {args.group!r} does not exist")
    rows = partition_rows(description, committed,
                          log_ends(admin, [tp.topic for tp in committed]
                                   + [tp.topic for tp in description.assigned]))
    total = sum(r["lag"] for r in rows if r["lag"] is not None)
    if args.json:
        write_json({"group": description.group_id, "state": description.state,
                    "protocol_type": description.protocol_type,
                    "protocol": description.protocol, "coordinator": description.coordinator,
                    "members": [_member_dict(m) for m in description.members],
                    "partitions": rows, "lag": total})
        return 0
    _print_description(description, rows, total)
    return 0


def _member_dict(m) -> dict:
    return {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscription": list(m.subscription),
            "assignment": [{"topic": t, "partition": p} for t, p in m.assignment]}


def _print_description(d, rows, total) -> None:
    out = console()
    out.print(f"group {d.group_id}: {d.state}, protocol {d.protocol or '-'}, "
              f"coordinator node {d.coordinator}, {len(d.members)} member(s)")
    if d.members:
        members = Table(title="members")
        for column in ("member id", "instance id", "client id", "host", "assignment"):
            members.add_column(column)
        for m in d.members:
            members.add_row(m.member_id, m.group_instance_id or "-", m.client_id,
                            m.client_host, _partitions_text(m.assignment))
        out.print(members)
    partitions = Table(title="offsets")
    for column in ("topic", "partition", "committed", "log end", "lag", "member id"):
        partitions.add_column(column, justify="left" if column in ("topic", "member id")
                              else "right")
    for r in rows:
        partitions.add_row(r["topic"], str(r["partition"]), _text(r["committed"]),
                           _text(r["log_end"]), _text(r["lag"]), r["member_id"] or "-")
    out.print(partitions)
    out.print(f"total lag: {total}")


def _partitions_text(assignment) -> str:
    by_topic: dict[str, list[str]] = {}
    for topic, partition in assignment:
        by_topic.setdefault(topic, []).append(str(partition))
    return " ".join(f"{t}[{','.join(ps)}]" for t, ps in by_topic.items()) or "-"


def _text(value) -> str:
    return "-" if value is None else str(value)


DELETE_REFUSALS = {
    ErrorCode.NON_EMPTY_GROUP: "it has members; stop its consumers first",
    ErrorCode.GROUP_ID_NOT_FOUND: "no such group",
}


def _delete(admin, args) -> int:
    failed = 0
    for group_id, error in admin.delete_groups(args.groups).items():
        if error is None:
            print(f"group {group_id} deleted")
            continue
        failed += 1
        why = DELETE_REFUSALS.get(error.code, str(error))
        print(f"klog: cannot delete group {group_id}: {why} ({error.code.name})",
              file=sys.stderr)
    return 1 if failed else 0


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": groups_reset.run,
           "delete-offsets": groups_delete_offsets.run, "delete": _delete}
