"""`klog configs describe|alter` in the shape of Kafka's kafka-configs: --entity-type
topics|brokers|clients|users, --entity-name NAME or --entity-default, --add-config
k1=v1,k2=[v2,v3] and --delete-config k1,k2 (IncrementalAlterConfigs, so keys not named keep
their values). `describe` lists the dynamic configs, as kafka-configs does (`--all`: every
config with its source).

Entity types clients and users are the client quotas': `klog_cli.client_quotas` serves them
(`describe(args)` and `alter(args)`, each returning the exit status) when it is installed.
"""

from __future__ import annotations

import importlib
import sys

import orjson

from klog.admin import Admin
from klog.admin_configs import ConfigEntry, alter_configs, describe_configs_of
from klog.errors import KlogError

ENTITY_TYPES = ("topics", "brokers", "clients", "users")


def add_arguments(parser) -> None:
    parser.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092",
                        help="host:port[,host:port] of the appliance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="an entity's dynamic configs")
    alter = actions.add_parser("alter", help="add or delete an entity's dynamic configs")
    for sub in (describe, alter):
        sub.add_argument("--entity-type", required=True, choices=ENTITY_TYPES)
        named = sub.add_mutually_exclusive_group()
        named.add_argument("--entity-name", help="topic name, broker (node) id, client id, user")
        named.add_argument("--entity-default", action="store_true",
                           help="the entity type's default (brokers: every broker's)")
        sub.add_argument("--user", help="clients of this user (entity type clients)")
    describe.add_argument("--all", action="store_true", help="every config, not only dynamic")
    describe.add_argument("--json", action="store_true")
    alter.add_argument("--add-config", default="", metavar="K1=V1,K2=[V2,V3]",
                       help="keys to set, Kafka's syntax (a list value in brackets)")
    alter.add_argument("--delete-config", default="", metavar="K1,K2",
                       help="keys to delete (back to the inherited value)")
    alter.add_argument("--validate-only", action="store_true")


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs' --add-config: `k1=v1,k2=[a,b]` (brackets keep commas in a value)."""
    configs: dict[str, str] = {}
    depth, start, parts = 0, 0, []
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in (p.strip() for p in parts):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config expects KEY=VALUE pairs, got {part!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        configs[key.strip()] = value
    return configs


def _name(args) -> str:
    if args.entity_default:
        return ""
    if args.entity_name is None:
        raise ValueError("--entity-name or --entity-default is needed")
    return args.entity_name


def run(args) -> int:
    if args.entity_type in ("clients", "users"):
        try:
            quotas = importlib.import_module("klog_cli.client_quotas")
        except ModuleNotFoundError:
            print(f"klog: entity type {args.entity_type} is not served yet", file=sys.stderr)
            return 2
        return getattr(quotas, args.action)(args)
    try:
        name = _name(args)
        with Admin(args.bootstrap_server) as admin:
            if args.action == "describe":
                return _describe(admin, args, name)
            return _alter(admin, args, name)
    except (KlogError, ValueError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1


def _entity_words(args, name: str) -> str:
    if args.entity_type == "brokers":
        return "default broker" if name == "" else f"broker {name}"
    return f"topic {name}"


def _describe(admin, args, name: str) -> int:
    entries = describe_configs_of(admin, args.entity_type, name)
    if args.entity_type == "brokers" and name == "":  # the default's own values
        entries = [ConfigEntry(n, v, s, False, ()) for e in entries
                   for n, v, s in e.synonyms if s == "DYNAMIC_DEFAULT_BROKER_CONFIG"]
    elif not args.all:
        own = "DYNAMIC_TOPIC_CONFIG" if args.entity_type == "topics" else "DYNAMIC_BROKER_CONFIG"
        entries = [e for e in entries if e.source == own]
    if args.json:
        sys.stdout.buffer.write(orjson.dumps([
            {"name": e.name, "value": e.value, "source": e.source,
             "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in e.synonyms]}
            for e in entries]) + b"\n")
        return 0
    kind = "All" if args.all else "Dynamic"
    print(f"{kind} configs for {_entity_words(args, name)} are:")
    for e in entries:
        synonyms = ", ".join(f"{s}:{n}={v}" for n, v, s in e.synonyms)
        print(f"  {e.name}={e.value} sensitive=false synonyms={{{synonyms}}}")
    return 0


def _alter(admin, args, name: str) -> int:
    add = parse_add_config(args.add_config)
    delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not add and not delete:
        raise ValueError("nothing to alter: give --add-config and/or --delete-config")
    alter_configs(admin, args.entity_type, name, add=add, delete=delete,
                  validate_only=args.validate_only)
    verb = "would be" if args.validate_only else "Completed"
    print(f"{verb} updating config for {_entity_words(args, name)}.")
    return 0
