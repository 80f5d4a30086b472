"""`klog configs describe|alter --entity-type clients|users`: client quotas in the shape of
Kafka's kafka-configs (`klog_cli.configs` parses the arguments and calls `describe(args)` or
`alter(args)`; each returns the exit status).

Entities: `--entity-type users --entity-name alice` (or `--entity-default`), `--entity-type
clients --entity-name c1` (or `--entity-default`), and a user's client ids with `--user alice`
beside `--entity-type clients` (`--user '<default>'`: the default user's). Keys are Kafka's
(producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate); the
broker checks them and answers Kafka's errors, printed here. Sent as AlterClientQuotas and
DescribeClientQuotas.
"""

from __future__ import annotations

import sys

import orjson

from klog.admin import Admin
from klog.errors import KlogError
from klog.protocol.apis import alter_client_quotas as alter_api
from klog.protocol.apis import describe_client_quotas as describe_api
from klog.protocol.error_codes import ErrorCode

DEFAULT = "<default>"
TYPE_OF = {"clients": "client-id", "users": "user"}
EXACT, DEFAULT_MATCH, ANY = 0, 1, 2


def _entity(args) -> list[tuple[str, str | None]]:
    """The entity named by the arguments, as (type, name) pairs (name None: default)."""
    if args.entity_name is None and not args.entity_default:
        raise ValueError("--entity-name or --entity-default is needed")
    pairs = [(TYPE_OF[args.entity_type], None if args.entity_default else args.entity_name)]
    if getattr(args, "user", None) is not None:
        if args.entity_type != "clients":
            raise ValueError("--user goes with --entity-type clients")
        pairs.insert(0, ("user", None if args.user == DEFAULT else args.user))
    return pairs


def _components(args) -> list:
    own = TYPE_OF[args.entity_type]
    if args.entity_default:
        components = [(own, DEFAULT_MATCH, None)]
    elif args.entity_name is not None:
        components = [(own, EXACT, args.entity_name)]
    else:
        components = [(own, ANY, None)]
    if getattr(args, "user", None) is not None:
        components.insert(0, ("user", DEFAULT_MATCH, None) if args.user == DEFAULT
                          else ("user", EXACT, args.user))
    return [describe_api.ComponentData(entity_type=t, match_type=m, match=n)
            for t, m, n in components]


def _words(pairs) -> str:
    names = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"the default {names[t]}" if n is None else f"{names[t]} '{n}'"
                     for t, n in sorted(pairs, key=lambda p: p[0] != "user"))


def describe(args) -> int:
    try:
        components = _components(args)
        with Admin(args.bootstrap_server) as admin:
            answer = admin.request(describe_api, components=components, strict=True)
    except (KlogError, ValueError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    if answer.error_code:
        print(f"klog: {ErrorCode(answer.error_code).name}: {answer.error_message}",
              file=sys.stderr)
        return 1
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                {v.key: v.value for v in entry.values}) for entry in answer.entries or []]
    if getattr(args, "json", False):
        sys.stdout.buffer.write(orjson.dumps([
            {"entity": {t: n for t, n in pairs}, "values": values}
            for pairs, values in entries]) + b"\n")
        return 0
    for pairs, values in entries:
        text = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        print(f"Quota configs for {_words(pairs)} are {text}")
    return 0


def _ops(args) -> list:
    from klog_cli.configs import parse_add_config

    add = parse_add_config(args.add_config)
    delete = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not add and not delete:
        raise ValueError("nothing to alter: give --add-config and/or --delete-config")
    ops = []
    for key, text in add.items():
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{key}: {text!r} is not a number") from None
        ops.append(alter_api.OpData(key=key, value=value, remove=False))
    ops += [alter_api.OpData(key=key, value=0.0, remove=True) for key in delete]
    return ops


def alter(args) -> int:
    try:
        pairs = _entity(args)
        ops = _ops(args)
        with Admin(args.bootstrap_server) as admin:
            answer = admin.request(alter_api, validate_only=args.validate_only, entries=[
                alter_api.RequestEntry(entity=[
                    alter_api.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
                    ops=ops)])
    except (KlogError, ValueError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    result = answer.entries[0]
    if result.error_code:
        print(f"klog: {ErrorCode(result.error_code).name}: {result.error_message}",
              file=sys.stderr)
        return 1
    verb = "Validated" if args.validate_only else "Completed"
    print(f"{verb} updating config for {_words(pairs)}.")
    return 0
