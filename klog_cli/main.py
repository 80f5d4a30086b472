"""Entry point of the `klog` command: one sub-command module per verb, registered here."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
import tomllib
from pathlib import Path

# verb -> module under klog_cli/ that defines add_arguments(parser) and run(args) -> int
COMMANDS = {
    "appliance": ("appliance", "run an appliance"),
    "demo": ("demo", "start an appliance on the embedded default and show it working"),
    "status": ("status", "show a running appliance (read from its shared memory)"),
    "topics": ("topics", "create, alter (partitions, configs), list, describe, delete topics"),
    "dump-log": ("dump_log", "print the batches (and records) of a segment file"),
    "produce": ("produce", "send stdin lines to a topic, one message per line"),
    "consume": ("consume", "print a topic's messages (kcat-style --format)"),
    "groups": ("groups", "list, describe, reset offsets of and delete consumer groups"),
    "transactions": ("transactions", "list and describe transactions (transactional ids)"),
    "users": ("users", "add, remove and list the SCRAM users of an appliance alone"),
    "acls": ("acls", "add, remove and list ACLs, as Kafka's kafka-acls.sh"),
    "configs": ("configs", "describe and alter dynamic configs, as Kafka's kafka-configs.sh"),
    "cluster": ("cluster", "the fleet of appliances, as ZooKeeper holds it (cluster mode)"),
    "demo-cluster": ("demo_cluster", "start ZooKeeper and three appliances; show the fleet"),
    "load-hourly": ("load_hourly", "load hours of a topic into the Parquet warehouse (Spark)"),
}

OUR_PACKAGES = {"klog", "appliance", "cluster", "klog_cli", "klog_pipeline"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="klog", description="klog: a Kafka-compatible log broker")
    parser.add_argument("--version", action="version", version=f"klog {version()}")
    verbs = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    for verb, (module_name, summary) in COMMANDS.items():
        module = importlib.import_module(f"klog_cli.{module_name}")
        sub = verbs.add_parser(verb, help=summary, description=summary)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def version() -> str:
    """The installed distribution's version; run from a checkout that was never installed,
    the version its pyproject.toml declares, so a bug report still names one."""
    try:
        return importlib.metadata.version("klog")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            with pyproject.open("rb") as file:
                return f"{tomllib.load(file)['project']['version']} (not installed)"
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] in OUR_PACKAGES:
            raise
        # `pip install klog` is the client library alone; the command is the appliance's
        print(f"klog: {missing.name} is missing: the klog command needs the appliance's "
              "dependencies (pip install 'klog[appliance]')", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
