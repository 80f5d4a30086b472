"""The SCRAM credentials of an appliance alone, in a file: salted, never a password. (In a
fleet they live in ZooKeeper, `cluster.security_store`; workers then look them up in what their
supervisor broadcast, `BroadcastCredentials`.)

``<first log dir>/.klog-security/scram-credentials.json``, mode 0600, written atomically (temp
file, fsync, rename, fsync of the directory) by `klog users`, before or while the appliance
runs. Its format is klog's own::

    {"version": 1, "users": {"alice": {"SCRAM-SHA-512": {"salt": "<base64>",
        "iterations": 4096, "stored_key": "<base64>", "server_key": "<base64>"}}}}

Workers read it through :class:`ScramCredentialFile`, which checks the file's identity (inode,
size, mtime) at each authentication and re-reads it when it changed: one stat per login, and
no signal to deliver for a change to take effect (a file that cannot be read keeps the last
good contents, and the reason is logged once).
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from appliance.security_files import security_file, write_private
from klog.protocol.sasl import SCRAM_MECHANISMS
from klog.protocol.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"
Users = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


def credentials_path(first_log_dir: Path) -> Path:
    return security_file(first_log_dir, FILE_NAME)


def decode(data: bytes, *, source: str) -> Users:
    """The users of a file's contents. Raises ValueError naming the file and the problem."""
    try:
        document = json.loads(data)
        users: Users = {}
        for name, by_mechanism in document["users"].items():
            users[name] = {}
            for mechanism, c in by_mechanism.items():
                if mechanism not in SCRAM_MECHANISMS:
                    raise ValueError(f"unknown mechanism {mechanism!r}")
                users[name][mechanism] = ScramCredential(
                    base64.b64decode(c["salt"]), int(c["iterations"]),
                    base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]))
        return users
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{source}: not a SCRAM credentials file: {exc!r}") from None


def encode(users: Users) -> bytes:
    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode()

    return json.dumps({"version": 1, "users": {
        name: {mechanism: {"salt": b64(c.salt), "iterations": c.iterations,
                           "stored_key": b64(c.stored_key), "server_key": b64(c.server_key)}
               for mechanism, c in sorted(by_mechanism.items())}
        for name, by_mechanism in sorted(users.items())}}, indent=1).encode() + b"\n"


def read_users(path: Path) -> Users:
    """The users in ``path``; none when it does not exist. Raises ValueError or OSError."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    return decode(data, source=str(path))


def write_users(path: Path, users: Users) -> None:
    """Replace the file atomically; it is created readable by its owner only."""
    write_private(Path(path), encode(users))


@contextmanager
def locked(path: Path):
    """Serialise the writers of the file (`klog users`, the supervisor) with a lock beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ScramChange:
    """One credential to store (`credential` set) or remove (None), from
    AlterUserScramCredentials; already checked by the worker."""

    user: str
    mechanism: str
    credential: ScramCredential | None


def apply_changes(credentials: dict[str, ScramCredential],
                  changes: Iterable[ScramChange]) -> dict[str, ScramCredential]:
    """One user's credentials after `changes` (removing a missing one changes nothing)."""
    new = dict(credentials)
    for change in changes:
        if change.credential is None:
            new.pop(change.mechanism, None)
        else:
            new[change.mechanism] = change.credential
    return new


class ScramFileStore:
    """The supervisor's writer of the file of an appliance alone: workers re-read the file by
    themselves, so there is nothing to broadcast (`users` is None)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def users(self) -> Users | None:
        return None

    def alter(self, changes: Iterable[ScramChange]) -> None:
        """Apply `changes` to the file. Raises OSError, ValueError (a file that does not parse)."""
        with locked(self.path):
            self.alter_unlocked(changes)

    def alter_unlocked(self, changes: Iterable[ScramChange]) -> None:
        """`alter` for a caller that holds the lock already (`klog users`)."""
        changes = list(changes)
        users = read_users(self.path)
        for name in dict.fromkeys(c.user for c in changes):
            credentials = apply_changes(users.get(name, {}),
                                        [c for c in changes if c.user == name])
            if credentials:
                users[name] = credentials
            else:
                users.pop(name, None)
        write_users(self.path, users)


class BroadcastCredentials:
    """A worker's view of the fleet's users, as its supervisor last broadcast them (from
    ZooKeeper): the same `lookup` and `users` as `ScramCredentialFile`."""

    def __init__(self, users: Callable[[], Users]) -> None:
        self._users = users

    def users(self) -> Users:
        return self._users()

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users().get(user, {}).get(mechanism)


class ScramCredentialFile:
    """A worker's view of the file, re-read when it changes (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._identity: tuple | None = None
        self._users: Users = {}
        self._warned: tuple | None = None

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        self._refresh()
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> Users:
        self._refresh()
        return self._users

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._identity, self._users = None, {}
            return
        except OSError as exc:
            self._warn(("stat", exc.errno), f"cannot stat {self.path}: {exc}")
            return
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        if identity == self._identity:
            return
        try:
            self._users = read_users(self.path)
        except (OSError, ValueError) as exc:
            self._warn(identity, f"keeping the SCRAM credentials read before: {exc}")
            return
        self._identity = identity

    def _warn(self, key: tuple, message: str) -> None:
        if self._warned != key:
            self._warned = key
            log.warning("%s", message)
