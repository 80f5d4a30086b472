"""One appliance's ZooKeeper session: the only module that imports kazoo.

It connects to `zookeeper.connect` (creating its chroot when missing), reports connection
states to a callback that must not block (kazoo calls it on its own thread), and keeps the
appliance's ephemeral nodes: after an expired session they are gone, so they are written
again on the new session. Before writing one it checks the owner of what is there: a node
left by one of our own earlier sessions is replaced, one held by another live session means
two processes claim the same identity, and is refused (`RegistrationConflict`).

Errors: `ZooKeeperUnavailable` when a call cannot be answered (no quorum, no connection);
kazoo's own NodeExists/NoNode/BadVersion errors are translated to ours below.

Security (`zookeeper.set.acl`, `zookeeper.digest.credentials`): the session authenticates with
the digest credentials, and every znode it creates (`create`, `ensure_path`, a multi's
`create`, the chroot) carries `ZnodeAcls.for_path`: all rights for that digest identity,
world READ only where no secret lives (never under `/config/users`), as Kafka's defaultAcls.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import Callback, EventType
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from cluster.security_znodes import is_secret

log = logging.getLogger(__name__)

CONNECTED, SUSPENDED, LOST = "CONNECTED", "SUSPENDED", "LOST"

__all__ = ["BadVersionError", "NodeExistsError", "NoNodeError", "NotEmptyError",
           "NotAuthorized", "RegistrationConflict", "Session", "ZooKeeperUnavailable",
           "CONNECTED", "SUSPENDED", "LOST", "RolledBackError", "RuntimeInconsistency",
           "EventType"]


class ZooKeeperUnavailable(ConnectionError):
    """ZooKeeper cannot answer now (connection lost, no quorum, session expired): retriable."""


class NotAuthorized(PermissionError):
    """ZooKeeper refused a call by a znode's ACL: klog's `zookeeper.digest.credentials` are
    missing, or not the identity the znode's ACL names."""


class RegistrationConflict(RuntimeError):
    """An ephemeral node we own by identity is held by another live session."""


UNAVAILABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)
# requests pipelined under one request timeout: a chunk of this many answers in well under a
# second even on a busy machine (get_many, transactions)
PIPELINE_CHUNK = 1000


class _Gathered:
    """Several of kazoo's async results awaited as one, in `_retrying`'s shape: `get`
    returns each result, or the exception of an op that failed for its own reason (NoNode);
    a lost connection or timeout raises, so the whole batch is retried."""

    def __init__(self, pending: list):
        self.pending = pending

    def get(self, timeout: float):
        deadline = time.monotonic() + timeout
        out = []
        for async_result in self.pending:
            try:
                out.append(async_result.get(timeout=max(0.01, deadline - time.monotonic())))
            except UNAVAILABLE:
                raise
            except KazooException as exc:
                out.append(exc)
        return out


class ZnodeAcls:
    """The ACLs of the znodes a secured session creates (see the module docstring)."""

    def __init__(self, credentials: str):
        user, _, password = credentials.partition(":")
        self.auth_data = [("digest", credentials)]
        self.secret = [make_digest_acl(user, password, all=True)]
        self.open = self.secret + list(READ_ACL_UNSAFE)

    def for_path(self, path: str) -> list:
        return self.secret if is_secret(path) else self.open


class _SecuredTransaction:
    """A kazoo transaction whose `create`s carry the session's ACLs (kazoo's transactions
    ignore the client's default ACL)."""

    def __init__(self, tx, acls: ZnodeAcls):
        self._tx, self._acls = tx, acls

    def create(self, path, value=b"", acl=None, **kwargs):
        return self._tx.create(path, value, acl or self._acls.for_path(path), **kwargs)

    def __getattr__(self, name):
        return getattr(self._tx, name)


def split_connect(connect: str) -> tuple[str, str]:
    """`h1:2181,h2:2181/klog` -> ("h1:2181,h2:2181", "/klog"); no chroot -> ("...", "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot) if slash else ""


class Session:
    """A kazoo client with klog's rules: see the module docstring."""

    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int,
                 on_state: Callable[[str], None] = lambda state: None,
                 digest_credentials: str | None = None, set_acl: bool = False):
        self.connect = connect
        self.session_timeout_s = session_timeout_ms / 1000
        self.connection_timeout_s = connection_timeout_ms / 1000
        # a request waits at most this long: within it a live ensemble always answers
        self.request_timeout_s = min(self.session_timeout_s, 10.0)
        self.on_state = on_state
        self._ephemerals: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._old_sessions: set[int] = set()
        hosts, self.chroot = split_connect(connect)
        self._hosts = hosts
        # zookeeper.digest.credentials: sent at connect; with set_acl, our znodes' ACLs
        self.acls = ZnodeAcls(digest_credentials) if digest_credentials else None
        self.set_acl = set_acl and self.acls is not None
        self._auth_data = self.acls.auth_data if self.acls else None
        self.client = KazooClient(hosts=connect, timeout=self.session_timeout_s,
                                  connection_retry={"max_tries": -1, "delay": 0.2,
                                                    "max_delay": 2.0},
                                  auth_data=self._auth_data,
                                  default_acl=self.acls.open if self.set_acl else None)
        self.client.add_listener(self._on_state)

    # life cycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect (creating the chroot first); ZooKeeperUnavailable after the timeout."""
        if self.chroot:
            self._ensure_chroot()
        try:
            self.client.start(timeout=self.connection_timeout_s)
        except KazooTimeoutError:
            self.client.stop()
            raise ZooKeeperUnavailable(
                f"no ZooKeeper server of {self.connect} answered within "
                f"{self.connection_timeout_s:g} s (zookeeper.connection.timeout.ms)") from None

    def _ensure_chroot(self) -> None:
        bare = KazooClient(hosts=self._hosts, timeout=self.session_timeout_s,
                           auth_data=self._auth_data)
        try:
            bare.start(timeout=self.connection_timeout_s)
            bare.ensure_path(self.chroot, acl=self.acls.open if self.set_acl else None)
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(
                f"no ZooKeeper server of {self._hosts} answered within "
                f"{self.connection_timeout_s:g} s (zookeeper.connection.timeout.ms)") from None
        finally:
            bare.stop()
            bare.close()

    def stop(self) -> None:
        """Close the session: our ephemeral nodes disappear at once, not after a timeout."""
        try:
            self.client.stop()
            self.client.close()
        except KazooException as exc:
            log.info("closing the ZooKeeper session: %s", exc)

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    @property
    def state(self) -> str:
        return str(self.client.state)

    # connection states ------------------------------------------------------------------------

    def _on_state(self, state) -> None:
        """kazoo's thread: never block here (no ZooKeeper calls); hand the news on."""
        name = {KazooState.CONNECTED: CONNECTED, KazooState.SUSPENDED: SUSPENDED,
                KazooState.LOST: LOST}[state]
        if name == CONNECTED:
            self.remember_session()
        if name == CONNECTED and self._ephemerals:
            # a new session after an expiry: its ephemerals are gone; re-create off-thread
            threading.Thread(target=self._restore_ephemerals, daemon=True,
                             name="klog-zk-reregister").start()
        self.on_state(name)

    # calls ----------------------------------------------------------------------------------

    def call(self, method: str, *args, **kwargs):
        """`client.<method>(...)`, answered within the request timeout: a call made while
        the ensemble has no quorum would otherwise wait for as long as the outage lasts.
        A dropped connection is retried (the client moves to another server: losing one
        server of three changes nothing); past the timeout, ZooKeeperUnavailable."""
        return self._retrying(lambda: getattr(self.client, f"{method}_async")(*args, **kwargs),
                              method)

    def get_many(self, paths: list[str], watch=None, *,
                 missing_watch=None) -> list[tuple[bytes, object] | None]:
        """`(data, stat)` of each path, None for a missing one (watched for its creation when
        `watch` is given). The requests are pipelined on the session's connection, so a
        fleet of many partitions is read in a few round trips instead of one per node; in
        chunks of PIPELINE_CHUNK, each with the request timeout of its own: the timeout
        tells an unreachable ensemble, and 10,000 partition states take longer than it on a
        busy machine (issue 26: every fleet pass failed with KazooTimeoutError).
        `missing_watch`: watch the missing ones with this instead (the present ones then
        with `watch` only, which may be None)."""
        out = []
        missing_watch = missing_watch or watch
        for start in range(0, len(paths), PIPELINE_CHUNK):
            out += self._get_chunk(paths[start:start + PIPELINE_CHUNK], watch, missing_watch)
        return out

    def _get_chunk(self, paths: list[str], watch,
                   missing_watch) -> list[tuple[bytes, object] | None]:
        def start_all():
            return [self.client.get_async(path, watch=watch) for path in paths]
        results = self._retrying(lambda: _Gathered(start_all()), "get")
        missing = [i for i, r in enumerate(results) if isinstance(r, NoNodeError)]
        if missing_watch is not None and missing:
            created = self._retrying(lambda: _Gathered(
                [self.client.exists_async(paths[i], watch=missing_watch) for i in missing]),
                "exists")
            for i, stat in zip(missing, created):
                if stat is not None and not isinstance(stat, Exception):
                    results[i] = self._get_or_none(paths[i], watch)  # created meanwhile
        out = []
        for result in results:
            if isinstance(result, NoNodeError) or result is None:
                out.append(None)
            elif isinstance(result, Exception):
                raise result
            else:
                out.append(result)
        return out

    def delete_many(self, paths: list[str]) -> list[Exception | None]:
        """Delete each path, pipelined as `get_many`; per path None or the error it met
        (NoNode: deleted by somebody else meanwhile)."""
        out: list[Exception | None] = []
        for start in range(0, len(paths), PIPELINE_CHUNK):
            chunk = paths[start:start + PIPELINE_CHUNK]
            results = self._retrying(lambda c=chunk: _Gathered(
                [self.client.delete_async(path) for path in c]), "delete")
            out += [r if isinstance(r, Exception) else None for r in results]
        return out

    def _get_or_none(self, path: str, watch):
        try:
            return self.call("get", path, watch=watch)
        except NoNodeError:
            return None

    def transaction(self, build: Callable[[object], None]) -> list:
        """Commit one multi built by `build(tx)`; its results (exceptions for failed ops)."""
        def commit():
            tx = self._transaction()
            build(tx)
            return tx.commit_async()
        return self._retrying(commit, "multi")

    def transactions(self, builds: list[Callable[[object], None]]) -> list:
        """Commit one multi per `build`, pipelined on the connection (one round trip for
        all, not one each); each multi's results, as `transaction` returns them. A multi
        stands alone: ZooKeeper applies or refuses each one whole, in the order given."""
        def commit_all(chunk):
            pending = []
            for build in chunk:
                tx = self._transaction()
                build(tx)
                pending.append(tx.commit_async())
            return _Gathered(pending)
        out = []
        for start in range(0, len(builds), PIPELINE_CHUNK):  # a timeout each, as get_many
            chunk = builds[start:start + PIPELINE_CHUNK]
            out += self._retrying(lambda c=chunk: commit_all(c), "multi")
        return out

    def _transaction(self):
        tx = self.client.transaction()
        return _SecuredTransaction(tx, self.acls) if self.set_acl else tx

    def _retrying(self, start: Callable, what: str):
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            try:
                return start().get(timeout=max(0.1, deadline - time.monotonic()))
            except ConnectionLoss as exc:
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailable(f"ZooKeeper {what} failed: {exc!r}") from None
                time.sleep(0.1)
            except UNAVAILABLE as exc:
                raise ZooKeeperUnavailable(f"ZooKeeper {what} failed: {exc!r}") from None
            except NoAuthError:
                raise NotAuthorized(
                    f"ZooKeeper refused {what} by a znode's ACL: zookeeper.digest.credentials "
                    f"are missing or not the identity the fleet's znodes grant") from None

    def drain_callbacks(self, timeout_s: float) -> bool:
        """Wait until the watch callbacks kazoo has queued so far have run (False after
        `timeout_s`). kazoo reads a watch's event before the response of any later request
        and queues the callback for its callback thread, so after this every event that
        preceded a response we have had is handled, our own writes' events included."""
        done = threading.Event()
        self.client.handler.dispatch_callback(Callback("drain", done.set, ()))
        return done.wait(timeout_s)

    # ephemeral registrations ----------------------------------------------------------------

    def register(self, path: str, value: bytes) -> None:
        """Hold an ephemeral node at `path` for as long as we live, across session expiries."""
        with self._lock:
            self._ephemerals[path] = value
        self._write_ephemeral(path, value)

    def unregister(self, path: str) -> None:
        with self._lock:
            self._ephemerals.pop(path, None)
        try:
            _, stat = self.call("get", path)
            if stat.ephemeralOwner == self.session_id:
                self.call("delete", path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def _write_ephemeral(self, path: str, value: bytes) -> None:
        """Create our node; replace one of our own earlier sessions'; wait out another
        session's (a restart after kill -9 finds its old node until that session expires)."""
        deadline = time.monotonic() + self.session_timeout_s + 5
        while True:
            try:
                self.call("create", path, value, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = self.call("get", path)
            except NoNodeError:
                continue  # gone meanwhile: create it now
            owner = stat.ephemeralOwner
            if owner == self.session_id:
                self.call("set", path, value)
                return
            if owner in self._old_sessions:
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self.call("delete", path, version=stat.version)
                continue
            if time.monotonic() > deadline:
                raise RegistrationConflict(
                    f"{self.chroot}{path} is held by another ZooKeeper session "
                    f"(0x{owner:x}): is another process running with the same broker.id?")
            time.sleep(0.5)

    def _restore_ephemerals(self) -> None:
        with self._lock:
            pending = dict(self._ephemerals)
        for path, value in pending.items():
            try:
                self._write_ephemeral(path, value)
                log.info("re-registered %s on a new ZooKeeper session", path)
            except (ZooKeeperUnavailable, RegistrationConflict, KazooException) as exc:
                log.error("cannot re-register %s: %s", path, exc)

    def remember_session(self) -> None:
        """Record the current session id as ours, so its leftovers may be replaced later."""
        if self.session_id is not None:
            self._old_sessions.add(self.session_id)
