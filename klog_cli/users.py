"""`klog users add|remove|list --config FILE`: the SCRAM users of an appliance or its fleet.

Alone they live in ``<first log dir>/.klog-security/scram-credentials.json``
(appliance/scram_credentials.py); when the config has ``zookeeper.connect``, in ZooKeeper as
Kafka's ``kafka-configs --alter --entity-type users`` writes them (``/config/users/<name>``
and a change notification, `cluster.security_store`, with ``zookeeper.digest.credentials``
when set), so every appliance of the fleet has them within a second. Salted either way: the
password is read from a file (or stdin with ``-``), turned into (salt, iterations, StoredKey,
ServerKey) and forgotten. The commands work before any appliance first starts, as Kafka's
``kafka-storage format --add-scram`` does, and while they run. Concurrent commands on a file
are serialised by a lock file beside it; in ZooKeeper by conditional writes. PLAIN users are
not managed here: they come from ``listener.name.<listener>.plain.sasl.jaas.config``, as in
Kafka.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

from appliance.config import ConfigError, load_config
from appliance.scram_credentials import (
    ScramChange,
    ScramFileStore,
    apply_changes,
    credentials_path,
    locked,
    read_users,
)
from cluster.security_store import SecurityStore
from cluster.session import ZooKeeperUnavailable
from klog.protocol.sasl import SCRAM_MECHANISMS
from klog.protocol.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, make_credential
from klog_cli.fleet_security import security_store

SALT_BYTES = 32


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a SCRAM user, or change its password")
    add.add_argument("name")
    add.add_argument("--mechanism", required=True, type=str.upper, choices=SCRAM_MECHANISMS)
    add.add_argument("--password-file", required=True,
                     help="a file whose first line is the password (- for stdin)")
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS,
                     help=f"PBKDF2 iterations ({MIN_ITERATIONS}-{MAX_ITERATIONS}, as Kafka)")
    remove = actions.add_parser("remove", help="remove a user's credential(s)")
    remove.add_argument("name")
    remove.add_argument("--mechanism", type=str.upper, choices=SCRAM_MECHANISMS,
                        help="only this mechanism's credential (default: all of the user's)")
    actions.add_parser("list", help="the users and their mechanisms (never a secret)")
    for sub in (add, remove, actions.choices["list"]):
        sub.add_argument("--config", "-c", required=True, help="the appliance's config file")
        sub.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")


def run(args) -> int:
    try:
        config = load_config(args.config, args.override)
        if config.zookeeper_connect:
            return _in_zookeeper(args, config)
        path = credentials_path(config.log_dirs[0])
        with locked(path):
            store = _FileUsers(path)
            return {"add": _add, "remove": _remove, "list": _list}[args.action](args, store)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1


class _FileUsers:
    """The appliance's file (locked by the caller)."""

    def __init__(self, path: Path):
        self.where = str(path)
        self._file = ScramFileStore(path)

    def users(self):
        return read_users(self._file.path)

    def alter(self, changes: list[ScramChange]) -> None:
        self._file.alter_unlocked(changes)


class _ZooKeeperUsers:
    """The fleet's users in ZooKeeper (`cluster.security_store`)."""

    def __init__(self, store: SecurityStore, connect: str):
        self.store, self.where = store, f"ZooKeeper {connect}"

    def users(self):
        self.store.refresh()
        return self.store.users()

    def alter(self, changes: list[ScramChange]) -> None:
        for name in dict.fromkeys(c.user for c in changes):
            mine = [c for c in changes if c.user == name]
            self.store.update_user(name, lambda current, m=mine: apply_changes(current, m))


def _in_zookeeper(args, config) -> int:
    try:
        with security_store(config) as store:
            return {"add": _add, "remove": _remove, "list": _list}[args.action](
                args, _ZooKeeperUsers(store, config.zookeeper_connect))
    except ZooKeeperUnavailable as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1


def _read_password(name: str) -> str:
    text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    password = text.splitlines()[0] if text else ""
    if not password:
        raise ValueError(f"{name}: no password on the first line")
    return password


def _add(args, store) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ValueError(f"--iterations must be within {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                         f"(Kafka's bounds), got {args.iterations}")
    if not args.name:
        raise ValueError("the user name is empty")
    credential = make_credential(args.mechanism, _read_password(args.password_file),
                                 secrets.token_bytes(SALT_BYTES), args.iterations)
    store.alter([ScramChange(args.name, args.mechanism, credential)])
    print(f"user {args.name}: {args.mechanism} credential stored ({args.iterations} "
          f"iterations) in {store.where}")
    return 0


def _remove(args, store) -> int:
    mechanisms = store.users().get(args.name, {})
    removed = [m for m in list(mechanisms) if args.mechanism in (None, m)]
    if not removed:
        what = f"a {args.mechanism} credential" if args.mechanism else "credentials"
        print(f"klog: user {args.name} has no {what} in {store.where}", file=sys.stderr)
        return 1
    store.alter([ScramChange(args.name, m, None) for m in removed])
    print(f"user {args.name}: removed {', '.join(removed)}")
    return 0


def _list(args, store) -> int:
    for name, mechanisms in sorted(store.users().items()):
        for mechanism, credential in sorted(mechanisms.items()):
            print(f"{name}\t{mechanism}\titerations={credential.iterations}")
    return 0
