"""`klog transactions list|describe` (Kafka's kafka-transactions.sh list/describe).

Through klog.Admin: ListTransactions on every node, DescribeTransactions on the transactional
id's coordinator. An open transaction (Ongoing, PrepareCommit, PrepareAbort) holds back the
last stable offset of the partitions it added: read_committed consumers wait there until it
ends; `describe` shows how long it has been open against its timeout, after which the
coordinator aborts it.
"""

from __future__ import annotations

import time

from rich.table import Table

from klog.errors import ErrorCode, KafkaError
from klog_cli.admin_action import run_action
from klog_cli.groups import _partitions_text, console, write_json

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every transactional id of every node")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="only these states (Ongoing, PrepareCommit, CompleteAbort, ...)")
    listing.add_argument("--open", action="store_true",
                         help="only open transactions (Ongoing, PrepareCommit, PrepareAbort)")
    listing.add_argument("--json", action="store_true")
    describe = actions.add_parser("describe", help="a transactional id's current transaction")
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    describe.add_argument("--json", action="store_true")


def run(args) -> int:
    return run_action(args, ACTIONS)


def _list(admin, args) -> int:
    states = list(args.state) + (list(OPEN_STATES) if args.open else [])
    listings = admin.list_transactions(states=states)
    if args.json:
        write_json([{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                     "state": t.state, "coordinator": t.coordinator} for t in listings])
        return 0
    table = Table(title=f"{len(listings)} transactional id(s)")
    for column in ("transactional id", "producer id", "state", "coordinator"):
        table.add_column(column, justify="right" if column == "producer id" else "left")
    for t in listings:
        table.add_row(t.transactional_id, str(t.producer_id), t.state, str(t.coordinator))
    console().print(table)
    return 0


def _describe(admin, args) -> int:
    try:
        d = admin.describe_transactions([args.transactional_id])[args.transactional_id]
    except KafkaError as exc:
        if exc.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            raise ValueError(f"transactional id {args.transactional_id!r} does not exist "
                             "(or has expired)") from None
        raise
    now_ms = int(time.time() * 1000)
    open_ms = now_ms - d.start_time_ms if d.start_time_ms >= 0 and d.is_open else None
    if args.json:
        write_json({"transactional_id": d.transactional_id, "state": d.state,
                    "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                    "timeout_ms": d.timeout_ms, "start_time_ms": d.start_time_ms,
                    "open_ms": open_ms, "coordinator": d.coordinator,
                    "partitions": [{"topic": t, "partition": p} for t, p in d.partitions]})
        return 0
    table = Table(title=f"transactional id {d.transactional_id}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("state", d.state)
    table.add_row("producer id / epoch", f"{d.producer_id} / {d.producer_epoch}")
    table.add_row("coordinator", f"node {d.coordinator}")
    table.add_row("timeout", f"{d.timeout_ms / 1000:g} s")
    table.add_row("open for", "-" if open_ms is None else
                  f"{open_ms / 1000:.1f} s (aborted by the coordinator after the timeout)")
    table.add_row("partitions", _partitions_text(d.partitions))
    console().print(table)
    return 0


ACTIONS = {"list": _list, "describe": _describe}
