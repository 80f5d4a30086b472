"""`klog acls add|remove|list`: Kafka's kafka-acls.sh for an appliance with an authorizer.

The options are kafka-acls.sh's: ``--allow-principal User:alice --operation Write --topic a``,
``--deny-principal``, ``--allow-host``/``--deny-host`` (default ``*``), ``--group``,
``--cluster``, ``--transactional-id``, ``--resource-pattern-type literal|prefixed`` (also
``any``/``match`` to list or remove). Where the ACLs go:

- ``--bootstrap-server HOST:PORT`` (with the client's ``--security-protocol``,
  ``--sasl-mechanism``, ``--sasl-plain-username``, ``--sasl-plain-password-file``): through
  CreateAcls/DeleteAcls/DescribeAcls, so a running appliance applies them on every worker;
- ``--config server.properties``: the appliance's ``acls.json`` itself, only while it is
  stopped (the running supervisor owns the file), e.g. to let the first super user in; when
  the config has ``zookeeper.connect``, the fleet's ACLs in ZooKeeper (Kafka's
  ``/kafka-acl*`` znodes and change notifications, as kafka-acls.sh ``--authorizer-properties
  zookeeper.connect=...`` writes them), before or while the appliances run.
"""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

from appliance.config import ConfigError, load_config
from appliance.log_dir_lock import LogDirLockedError, lock_log_dirs
from appliance.security.acl_file import acls_path, read_acls, write_acls
from appliance.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    invalid_reason,
)
from appliance.security.fleet_acl_book import FleetAclBook
from cluster.session import ZooKeeperUnavailable
from klog.admin import Admin
from klog.errors import KlogError
from klog.protocol.apis import create_acls, delete_acls, describe_acls
from klog.protocol.error_codes import ErrorCode
from klog_cli.fleet_security import StoreAcls, security_store


def _operation(text: str) -> Operation:
    """Kafka's spellings: Write, DescribeConfigs, IdempotentWrite, ClusterAction, All."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for op in Operation:
        if op.name.replace("_", "") == wanted and op not in (Operation.UNKNOWN, Operation.ANY):
            return op
    raise ValueError(f"unknown operation {text!r}")


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, summary in (("add", "add ACLs"), ("remove", "remove the ACLs that match"),
                          ("list", "list the ACLs that match")):
        sub = actions.add_parser(name, help=summary)
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--bootstrap-server", help="HOST:PORT of a running appliance")
        where.add_argument("--config", "-c", help="the config file of a stopped appliance")
        sub.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
        sub.add_argument("--security-protocol", default="PLAINTEXT",
                         choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
        sub.add_argument("--ssl-cafile", help="the CA that signed the broker's certificate")
        sub.add_argument("--ssl-certfile", help="a client certificate (PEM), on SSL")
        sub.add_argument("--ssl-keyfile", help="its private key (PEM)")
        sub.add_argument("--sasl-mechanism")
        sub.add_argument("--sasl-plain-username")
        sub.add_argument("--sasl-plain-password-file",
                         help="a file whose first line is the password (- for stdin)")
        resource = sub.add_mutually_exclusive_group(required=name == "add")
        resource.add_argument("--topic")
        resource.add_argument("--group")
        resource.add_argument("--transactional-id")
        resource.add_argument("--cluster", action="store_true")
        sub.add_argument("--resource-pattern-type", type=str.upper,
                         default="LITERAL" if name != "list" else None,
                         choices=["LITERAL", "PREFIXED", "ANY", "MATCH"])
        if name == "list":
            sub.add_argument("--principal", help="only the ACLs of this principal")
            continue
        sub.add_argument("--allow-principal", action="append", default=[])
        sub.add_argument("--deny-principal", action="append", default=[])
        sub.add_argument("--allow-host", action="append", default=[])
        sub.add_argument("--deny-host", action="append", default=[])
        sub.add_argument("--operation", action="append", default=[], type=_operation,
                         help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                              "DescribeConfigs, AlterConfigs, IdempotentWrite, All")


def _resource(args) -> tuple[ResourceType, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return ResourceType.ANY, None


def _pattern(args, *, default: PatternType) -> PatternType:
    if args.resource_pattern_type is None:
        return default
    return PatternType[args.resource_pattern_type]


def bindings(args) -> list[AclBinding]:
    """The ACLs `add` means: each (principal, host) with each operation."""
    if not args.operation:
        raise ValueError("--operation is required to add ACLs")
    if not args.allow_principal and not args.deny_principal:
        raise ValueError("--allow-principal or --deny-principal is required to add ACLs")
    rtype, name = _resource(args)
    pattern = _pattern(args, default=PatternType.LITERAL)
    found = []
    for permission, principals, hosts in (
            (Permission.ALLOW, args.allow_principal, args.allow_host or ["*"]),
            (Permission.DENY, args.deny_principal, args.deny_host or ["*"])):
        for principal in principals:
            for host in hosts:
                for op in args.operation:
                    acl = AclBinding(rtype, name, pattern, principal, host, op, permission)
                    problem = invalid_reason(acl)
                    if problem:
                        raise ValueError(problem)
                    found.append(acl)
    return found


def filters(args) -> list[AclFilter]:
    """What `remove` and `list` select (an absent option matches everything)."""
    rtype, name = _resource(args)
    pattern = _pattern(args, default=PatternType.ANY)
    if args.action == "list":
        return [AclFilter(rtype, name, pattern, args.principal)]
    ops = args.operation or [Operation.ANY]
    chosen = []
    for permission, principals, hosts in (
            (Permission.ALLOW, args.allow_principal, args.allow_host),
            (Permission.DENY, args.deny_principal, args.deny_host)):
        for principal in principals:
            for host in hosts or [None]:
                chosen += [AclFilter(rtype, name, pattern, principal, host, op, permission)
                           for op in ops]
    if not args.allow_principal and not args.deny_principal:
        chosen = [AclFilter(rtype, name, pattern, None, None, op, Permission.ANY)
                  for op in ops]
    return chosen


def run(args) -> int:
    try:
        if args.bootstrap_server:
            return _over_the_wire(args)
        return _in_the_file(args)
    except (ConfigError, ValueError, OSError, KlogError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1


def show(acls) -> None:
    """Kafka's kafka-acls.sh listing: the ACLs of each resource pattern."""
    by_resource: dict[tuple, list[AclBinding]] = {}
    for acl in sorted(acls):
        by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                               []).append(acl)
    for (rtype, name, pattern), group in by_resource.items():
        print(f"Current ACLs for resource `ResourcePattern(resourceType={rtype.name}, "
              f"name={name}, patternType={pattern.name})`: ")
        for acl in group:
            print(f" \t(principal={acl.principal}, host={acl.host}, "
                  f"operation={acl.operation.name}, permissionType={acl.permission.name})")
        print()


# --config: the file of a stopped appliance ------------------------------------------------


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def _while_stopped(config):
    """Hold the log dirs' locks while the file is changed: a running appliance (even one
    whose supervisor was killed and whose workers still stop) holds them, and an appliance
    starting meanwhile waits for them instead of reading a half-changed file. A shm region
    left behind by a kill -9 says nothing, the lock does."""
    existing = [d for d in config.log_dirs if Path(d).is_dir()]
    try:
        locks = lock_log_dirs(existing, wait_s=0)
    except LogDirLockedError:
        raise ValueError("the appliance is running: its supervisor owns the ACLs; use "
                         "--bootstrap-server (with the SASL options of a super user)") from None
    try:
        yield
    finally:
        locks.close()


def _in_zookeeper(args, config) -> int:
    try:
        with security_store(config) as store:
            book = FleetAclBook(StoreAcls(store))
            where = f"ZooKeeper {config.zookeeper_connect}"
            if args.action == "add":
                book.create(bindings(args))
                print(f"ACLs stored in {where}")
            elif args.action == "remove":
                removed = book.delete(filters(args))
                print(f"{len(removed)} ACL(s) removed from {where}")
            else:
                chosen = filters(args)
                show(a for a in book.acls if any(f.matches(a) for f in chosen))
    except ZooKeeperUnavailable as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1
    return 0


def _in_the_file(args) -> int:
    config = load_config(args.config, args.override)
    if config.zookeeper_connect:
        return _in_zookeeper(args, config)
    path = acls_path(config.log_dirs[0])
    stopped = _while_stopped(config) if args.action != "list" else nullcontext()
    with stopped, _locked(path):
        acls = read_acls(path)
        if args.action == "add":
            write_acls(path, acls | frozenset(bindings(args)))
            print(f"ACLs stored in {path}")
        elif args.action == "remove":
            chosen = filters(args)
            removed = frozenset(a for a in acls if any(f.matches(a) for f in chosen))
            write_acls(path, acls - removed)
            print(f"{len(removed)} ACL(s) removed from {path}")
        else:
            chosen = filters(args)
            show(a for a in acls if any(f.matches(a) for f in chosen))
    return 0


# --bootstrap-server: a running appliance ----------------------------------------------------


def _password(name: str | None) -> str | None:
    if name is None:
        return None
    text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    return text.splitlines()[0] if text else ""


def _check(code: int, message: str | None) -> None:
    if code:
        raise ValueError(f"{ErrorCode(code).name}: {message or ''}".rstrip(": "))


def _over_the_wire(args) -> int:
    with Admin(args.bootstrap_server, security_protocol=args.security_protocol,
               sasl_mechanism=args.sasl_mechanism,
               sasl_plain_username=args.sasl_plain_username,
               sasl_plain_password=_password(args.sasl_plain_password_file),
               ssl_cafile=args.ssl_cafile, ssl_certfile=args.ssl_certfile,
               ssl_keyfile=args.ssl_keyfile) as admin:
        if args.action == "add":
            answer = admin.request(create_acls, creations=[create_acls.AclCreation(
                resource_type=int(a.resource_type), resource_name=a.resource_name,
                resource_pattern_type=int(a.pattern_type), principal=a.principal,
                host=a.host, operation=int(a.operation), permission_type=int(a.permission))
                for a in bindings(args)])
            for result in answer.results:
                _check(result.error_code, result.error_message)
            print(f"{len(answer.results)} ACL(s) added")
        elif args.action == "remove":
            answer = admin.request(delete_acls, filters=[delete_acls.DeleteAclsFilter(
                resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal,
                host_filter=f.host, operation=int(f.operation),
                permission_type=int(f.permission)) for f in filters(args)])
            removed = set()
            for result in answer.filter_results:
                _check(result.error_code, result.error_message)
                removed.update((m.resource_type, m.resource_name, m.pattern_type, m.principal,
                                m.host, m.operation, m.permission_type)
                               for m in result.matching_acls)
            print(f"{len(removed)} ACL(s) removed")
        else:
            (f,) = filters(args)
            answer = admin.request(
                describe_acls, resource_type_filter=int(f.resource_type),
                resource_name_filter=f.resource_name, pattern_type_filter=int(f.pattern_type),
                principal_filter=f.principal, host_filter=None,
                operation=int(Operation.ANY), permission_type=int(Permission.ANY))
            _check(answer.error_code, answer.error_message)
            show(AclBinding(ResourceType(r.resource_type), r.resource_name,
                            PatternType(r.pattern_type), d.principal, d.host,
                            Operation(d.operation), Permission(d.permission_type))
                 for r in answer.resources for d in r.acls)
    return 0
