"""The fleet's SCRAM credentials and ACLs in ZooKeeper, kept current on a thread of its own.

Every appliance's supervisor holds one, on its member's session. It reads `/config/users/*`,
`/kafka-acl/*/*` and `/kafka-acl-extended/prefixed/*/*` whole at start, again after each change
notification (a watch on `/config/changes`, `/kafka-acl-changes` and
`/kafka-acl-extended-changes`: Kafka's brokers and tools write one after each change, and so
do we), and every FULL_READ_INTERVAL_S as a safety net under the watches (a session that
expired lost them). The sets are small (users and ACLs, not partitions), so a notification
re-reads everything rather than the one entity it names. kazoo's watch callback only wakes the
thread. Each new state bumps `generation` and calls `on_change` (on the store's thread: hand
it on, do not block); the supervisor then tells its workers.

Writes (`update_user`, `update_acls`) run on the caller's thread: read the node, change it,
write it back only if its version is unchanged (retried otherwise, as Kafka's
conditional updates), then write the change notification and re-read at once, so the caller's
own workers learn the change before the caller answers its client.

At the boundary the values are plain: users as `{name: {mechanism: ScramCredential}}`, ACLs
as tuples `(resource_type, pattern, name, principal, permission, operation, host)` of Kafka's
enum names ("TOPIC", "LITERAL", ..., "ALLOW", "READ") — the appliance turns them into its
own types without importing this package.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from cluster import security_znodes as sz
from cluster.session import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Session,
    ZooKeeperUnavailable,
)
from cluster.znodes import ZnodeError
from klog.protocol.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

FULL_READ_INTERVAL_S = 10.0
KEEP_NOTIFICATIONS = 100  # the newest change notifications kept; older ones are pruned
PRUNE_ABOVE = 200

Users = dict[str, dict[str, ScramCredential]]
AclRow = tuple[str, str, str, str, str, str, str]
Entry = tuple[str, str, str, str]  # principal, permission, operation, host


class SecurityStore:
    def __init__(self, session: Session, on_change: Callable[[], None] = lambda: None):
        self.session = session
        self.on_change = on_change
        self.generation = 0
        self._users: Users = {}
        self._acls: frozenset[AclRow] = frozenset()
        self._lock = threading.Lock()  # one refresh at a time; the values swap whole
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="klog-fleet-security",
                                        daemon=True)

    # life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Make the roots, read everything once, follow changes. Raises ZooKeeperUnavailable."""
        self.prepare()
        self.refresh()
        self._thread.start()

    def prepare(self) -> None:
        """The roots (and, with zookeeper.set.acl, the users' ACLs); enough for `klog users`,
        which writes without following."""
        self.session.call("ensure_path", "/config")
        for root in sz.ROOTS:
            self.session.call("ensure_path", root)
        self.secure_existing_users()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def secure_existing_users(self) -> None:
        """With zookeeper.set.acl: `/config/users` and the users under it made readable by us
        only, even when they were written before (without ACLs, by an open fleet or Kafka's
        tools). Cheap: one node per user. Other znodes keep the ACLs they were made with."""
        if not self.session.set_acl:
            return
        acl = self.session.acls.secret
        self.session.call("set_acls", sz.USERS, acl)
        for name in self.session.call("get_children", sz.USERS):
            with contextlib.suppress(NoNodeError):
                self.session.call("set_acls", sz.user_path(name), acl)

    # reading ------------------------------------------------------------------------------

    def users(self) -> Users:
        return self._users

    def acls(self) -> frozenset[AclRow]:
        return self._acls

    def _watch(self, event) -> None:
        """kazoo's thread: only wake ours."""
        self._wake.set()

    def _run(self) -> None:
        next_full = time.monotonic() + FULL_READ_INTERVAL_S
        failing = False
        while not self._stopping:
            self._wake.wait(max(0.0, next_full - time.monotonic()))
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.refresh()
                next_full = time.monotonic() + FULL_READ_INTERVAL_S
                failing = False
            except ZooKeeperUnavailable as exc:
                if not failing:  # once per outage, not once a second
                    log.warning("SCRAM users and ACLs not re-read: %s", exc)
                failing = True
                next_full = time.monotonic() + 1.0
            except Exception:  # keep following: a bad node is logged, the rest stays
                log.exception("SCRAM users and ACLs not re-read")
                next_full = time.monotonic() + 1.0

    def refresh(self) -> None:
        """Re-read users and ACLs (re-arming the notification watches); bump the generation
        and call on_change when something changed."""
        with self._lock:
            for path in (sz.CONFIG_CHANGES, sz.ACL_CHANGES, sz.ACL_EXTENDED_CHANGES):
                self.session.call("get_children", path, watch=self._watch)
            users = self._read_users()
            acls = self._read_acls()
            if users == self._users and acls == self._acls:
                return
            self._users, self._acls = users, acls
            self.generation += 1
        self.on_change()

    def _read_users(self) -> Users:
        names = sorted(self.session.call("get_children", sz.USERS))
        paths = [sz.user_path(n) for n in names]
        users: Users = {}
        for name, path, got in zip(names, paths, self.session.get_many(paths), strict=True):
            if got is None:
                continue
            try:
                credentials = sz.UserConfig.decode(got[0], path).credentials
            except ZnodeError as exc:
                log.error("%s", exc)
                continue
            if credentials:
                users[name] = credentials
        return users

    def _read_acls(self) -> frozenset[AclRow]:
        paths = []
        for root in (sz.ACL_LITERAL, sz.ACL_PREFIXED):
            for kind in self.session.call("get_children", root):
                if root == sz.ACL_LITERAL and kind == "extended":
                    continue
                try:
                    names = self.session.call("get_children", f"{root}/{kind}")
                except NoNodeError:
                    continue
                paths += [f"{root}/{kind}/{name}" for name in names]
        rows = set()
        for path, got in zip(paths, self.session.get_many(paths), strict=True):
            if got is None:
                continue
            try:
                resource = sz.resource_of_path(path)
                entries = sz.decode_acls(got[0], path)
            except ZnodeError as exc:
                log.error("%s", exc)
                continue
            rows.update((resource.resource_type, resource.pattern, resource.name, e.principal,
                         e.permission, e.operation, e.host) for e in entries)
        return frozenset(rows)

    # writing ------------------------------------------------------------------------------

    def update_user(self, name: str,
                    change: Callable[[dict[str, ScramCredential]], dict[str, ScramCredential]]
                    ) -> None:
        """Replace the user's credentials by `change(current)`; no credential left and no other
        config: the node goes. Raises ZooKeeperUnavailable."""
        path = sz.user_path(name)

        def write(data: bytes | None):
            current = sz.UserConfig.decode(data, path)
            new = sz.UserConfig(change(dict(current.credentials)), current.other)
            if new == current:
                return False
            return None if not new.credentials and not new.other else new.encode()
        if self._conditional_write(path, write):
            self._notify(f"{sz.CONFIG_CHANGES}/{sz.CONFIG_CHANGE_PREFIX}",
                         sz.encode_config_change(f"users/{name}"))

    def update_acls(self, resource: tuple[str, str, str],
                    change: Callable[[frozenset[Entry]], frozenset[Entry]]) -> None:
        """Replace the ACLs of one resource (type, pattern, name) by `change(current)`; none
        left: the node goes. Raises ZooKeeperUnavailable."""
        res = sz.AclResource(*resource)

        def write(data: bytes | None):
            current = frozenset((e.principal, e.permission, e.operation, e.host)
                                for e in sz.decode_acls(data, res.path))
            new = change(current)
            if new == current:
                return False
            return sz.encode_acls({sz.AclEntry(*e) for e in new}) if new else None
        if self._conditional_write(res.path, write):
            self._notify(*res.change_notification())

    def _conditional_write(self, path: str, write: Callable[[bytes | None], object]) -> bool:
        """`write(current data or None)` says the new data, None (delete) or False (no change);
        applied only if the node did not change meanwhile, else read again. True if written."""
        while True:
            try:
                data, stat = self.session.call("get", path)
            except NoNodeError:
                data, stat = None, None
            new = write(data)
            if new is False:
                return False
            try:
                if stat is None and new is None:
                    return False
                if stat is None:
                    self.session.call("create", path, new, makepath=True)
                elif new is None:
                    self.session.call("delete", path, version=stat.version)
                else:
                    self.session.call("set", path, new, version=stat.version)
                return True
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # changed meanwhile: read it again

    def _notify(self, prefix: str, payload: bytes) -> None:
        """The change notification every broker watches, then our own re-read at once."""
        self.session.call("create", prefix, payload, sequence=True, makepath=True)
        self._prune(prefix.rsplit("/", 1)[0])
        self.refresh()

    def _prune(self, directory: str) -> None:
        """Keep the newest notifications only (Kafka expires them after 15 minutes)."""
        children = sorted(self.session.call("get_children", directory))
        if len(children) <= PRUNE_ABOVE:
            return
        for child in children[:-KEEP_NOTIFICATIONS]:
            with contextlib.suppress(NoNodeError):
                self.session.call("delete", f"{directory}/{child}")
