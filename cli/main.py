"""Entry point of the `klog` command: one sub-command module per verb, registered here."""

from __future__ import annotations

import argparse
import importlib
import sys

# verb -> module under cli/ that defines add_arguments(parser) and run(args) -> int
COMMANDS = {
    "appliance": ("cli.appliance", "run an appliance"),
    "demo": ("cli.demo", "start an appliance on the embedded default and show it working"),
    "status": ("cli.status", "show a running appliance (read from its shared memory)"),
    "topics": ("cli.topics", "create, list, describe and delete topics"),
    "dump-log": ("cli.dump_log", "print the batches (and records) of a segment file"),
    "produce": ("cli.produce", "send stdin lines to a topic, one message per line"),
    "consume": ("cli.consume", "print a topic's messages (kcat-style --format)"),
    "groups": ("cli.groups", "list, describe, reset offsets of and delete consumer groups"),
    "cluster": ("cli.cluster", "the fleet of appliances, as ZooKeeper holds it (cluster mode)"),
    "demo-cluster": ("cli.demo_cluster", "start ZooKeeper and three appliances; show the fleet"),
    "load-hourly": ("cli.load_hourly", "load hours of a topic into the Parquet warehouse (Spark)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="klog", description="klog: a Kafka-compatible log broker")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for verb, (module_name, summary) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = verbs.add_parser(verb, help=summary, description=summary)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
