"""`klog topics create|alter|list|describe|delete` against a running broker (kafka-topics)."""

from __future__ import annotations

import sys

import orjson
from rich.console import Console
from rich.table import Table

from klog.admin_configs import alter_configs
from klog_cli.admin_action import run_action


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    create.add_argument("--validate-only", action="store_true")
    alter = actions.add_parser("alter", help="add partitions to a topic, or change its configs")
    alter.add_argument("topic")
    alter.add_argument("--partitions", type=int,
                       help="the new partition count (more than it has)")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a config override (IncrementalAlterConfigs); repeatable")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a config override (back to the broker's); repeatable")
    alter.add_argument("--validate-only", action="store_true")
    actions.add_parser("list", help="list topics")
    describe = actions.add_parser("describe", help="partitions, leaders and configs of a topic")
    describe.add_argument("topic")
    describe.add_argument("--json", action="store_true")
    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("topic")


def _configs(pairs: list[str]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"klog: --config expects KEY=VALUE, got {pair!r}")
        configs[key.strip()] = value.strip()
    return configs


def run(args) -> int:
    return run_action(args, ACTIONS)


def _create(admin, args) -> int:
    admin.create_topic(args.topic, args.partitions, replication_factor=args.replication_factor,
                       configs=_configs(args.config), validate_only=args.validate_only)
    verb = "would be created" if args.validate_only else "created"
    print(f"topic {args.topic} {verb}")
    return 0


def _alter(admin, args) -> int:
    if args.partitions is None and not args.config and not args.delete_config:
        raise ValueError("nothing to alter: give --partitions, --config or --delete-config")
    if args.config or args.delete_config:
        alter_configs(admin, "topics", args.topic, add=_configs(args.config),
                      delete=args.delete_config, validate_only=args.validate_only)
        verb = "would be" if args.validate_only else "are"
        print(f"configs of topic {args.topic} {verb} updated")
    if args.partitions is not None:
        admin.create_partitions(args.topic, args.partitions, validate_only=args.validate_only)
        verb = "would have" if args.validate_only else "now has"
        print(f"topic {args.topic} {verb} {args.partitions} partitions")
    return 0


def _list(admin, args) -> int:
    for name in admin.list_topics():
        print(name)
    return 0


def _describe(admin, args) -> int:
    topic = admin.describe_topic(args.topic)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps({
            "name": topic.name, "internal": topic.internal, "configs": topic.configs,
            "partitions": [{"partition": p.partition, "leader": p.leader,
                            "replicas": list(p.replicas), "isr": list(p.isr)}
                           for p in topic.partitions]}) + b"\n")
        return 0
    table = Table(title=f"{topic.name} ({len(topic.partitions)} partitions)")
    for column in ("partition", "leader", "replicas", "isr"):
        table.add_column(column, justify="right")
    for p in topic.partitions:
        table.add_row(str(p.partition), str(p.leader), ",".join(map(str, p.replicas)),
                      ",".join(map(str, p.isr)))
    console = Console()
    console.print(table)
    for key, value in sorted(topic.configs.items()):
        console.print(f"  {key}={value}")
    return 0


def _delete(admin, args) -> int:
    admin.delete_topic(args.topic)
    print(f"topic {args.topic} deleted")
    return 0


ACTIONS = {"create": _create, "alter": _alter, "list": _list, "describe": _describe,
           "delete": _delete}
