"""The fleet's SCRAM credentials and ACLs in ZooKeeper, kept current on a thread of its own.

Every appliance's supervisor holds one, on its member's session. It reads `/config/users/*`,
`/kafka-acl/*/*` and `/kafka-acl-extended/prefixed/*/*` whole at start, again after each change
notification (a watch on `/config/changes`, `/kafka-acl-changes` and
`/kafka-acl-extended-changes`: Kafka's brokers and tools write one after each change, and so
do we), and every FULL_READ_INTERVAL_S as a safety net under the watches (a session that
expired lost them). The sets are small (users and ACLs, not partitions), so a notification
re-reads everything rather than the one entity it names (the following and the writes are
`followed_store.FollowedStore`'s). Each new state bumps `generation` and calls `on_change`
(on the store's thread: hand it on, do not block); the supervisor then tells its workers.

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
from collections.abc import Callable

from cluster import security_znodes as sz
from cluster.followed_store import FollowedStore
from cluster.session import NoNodeError, Session
from cluster.znodes import ZnodeError
from klog.protocol.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

Users = dict[str, dict[str, ScramCredential]]
AclRow = tuple[str, str, str, str, str, str, str]
Entry = tuple[str, str, str, str]  # principal, permission, operation, host


class SecurityStore(FollowedStore):
    what = "SCRAM users and ACLs"

    def __init__(self, session: Session, on_change: Callable[[], None] = lambda: None):
        super().__init__(session, on_change, "klog-fleet-security")
        self._users: Users = {}
        self._acls: frozenset[AclRow] = frozenset()

    def prepare(self) -> None:
        """The roots (and, with zookeeper.set.acl, the users' ACLs); enough for `klog users`,
        which writes without following."""
        self.session.call("ensure_path", "/config")
        for root in sz.ROOTS:
            self.session.call("ensure_path", root)
        self.secure_existing_users()

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
        if self.conditional_write(path, write):
            self.notify(f"{sz.CONFIG_CHANGES}/{sz.CONFIG_CHANGE_PREFIX}",
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
        if self.conditional_write(res.path, write):
            self.notify(*res.change_notification())
