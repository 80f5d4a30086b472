"""`klog users add|remove|list --config FILE`: the SCRAM users of an appliance alone.

They live in ``<first log dir>/.klog-catalog/scram-credentials.json``
(appliance/scram_credentials.py), salted: the password is read from a file (or stdin with
``-``), turned into (salt, iterations, StoredKey, ServerKey) and forgotten. The commands work
before the appliance first starts, as Kafka's ``kafka-storage format --add-scram`` does, and
while it runs: workers re-read the file when it changes, at the next authentication.
Concurrent commands are serialised by a lock file beside it. PLAIN users are not managed here:
they come from ``listener.name.<listener>.plain.sasl.jaas.config``, as in Kafka.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import sys
from contextlib import contextmanager
from pathlib import Path

from appliance.config import ConfigError, load_config
from appliance.scram_credentials import credentials_path, read_users, write_users
from klog.protocol.sasl import SCRAM_MECHANISMS
from klog.protocol.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, make_credential

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
        path = credentials_path(config.log_dirs[0])
        with _locked(path):
            return {"add": _add, "remove": _remove, "list": _list}[args.action](args, path)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"klog: {exc}", file=sys.stderr)
        return 1


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_password(name: str) -> str:
    text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    password = text.splitlines()[0] if text else ""
    if not password:
        raise ValueError(f"{name}: no password on the first line")
    return password


def _add(args, path: Path) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ValueError(f"--iterations must be within {MIN_ITERATIONS}-{MAX_ITERATIONS} "
                         f"(Kafka's bounds), got {args.iterations}")
    if not args.name:
        raise ValueError("the user name is empty")
    credential = make_credential(args.mechanism, _read_password(args.password_file),
                                 secrets.token_bytes(SALT_BYTES), args.iterations)
    users = read_users(path)
    users.setdefault(args.name, {})[args.mechanism] = credential
    write_users(path, users)
    print(f"user {args.name}: {args.mechanism} credential stored ({args.iterations} "
          f"iterations) in {path}")
    return 0


def _remove(args, path: Path) -> int:
    users = read_users(path)
    mechanisms = users.get(args.name, {})
    removed = [m for m in list(mechanisms) if args.mechanism in (None, m)]
    if not removed:
        what = f"a {args.mechanism} credential" if args.mechanism else "credentials"
        print(f"klog: user {args.name} has no {what} in {path}", file=sys.stderr)
        return 1
    for mechanism in removed:
        del mechanisms[mechanism]
    if not mechanisms:
        users.pop(args.name, None)
    write_users(path, users)
    print(f"user {args.name}: removed {', '.join(removed)}")
    return 0


def _list(args, path: Path) -> int:
    for name, mechanisms in sorted(read_users(path).items()):
        for mechanism, credential in sorted(mechanisms.items()):
            print(f"{name}\t{mechanism}\titerations={credential.iterations}")
    return 0
