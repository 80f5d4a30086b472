"""A small set of znodes that every appliance keeps a copy of and follows, as Kafka's brokers
follow `/config/*` and the ACLs: what `security_store` (SCRAM users, ACLs) and
`config_store` (dynamic configs, quotas) share.

- Following: one thread per store re-reads everything after each change notification (a
  watch on the notification directories, which kazoo's thread only turns into a wake-up)
  and every FULL_READ_INTERVAL_S as a safety net under the watches (a session that expired
  lost them). The sets are small, so a notification re-reads all rather than the one
  entity it names. A failed read is logged once per outage and tried again a second later.
- Writing: a conditional read-change-write of one znode (retried when it changed meanwhile,
  as Kafka's conditional updates), then Kafka's change notification (a sequential znode),
  the oldest notifications pruned, and the store's own re-read at once, so the writer's own
  workers learn the change before the writer answers its client.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from cluster.session import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Session,
    ZooKeeperUnavailable,
)

log = logging.getLogger(__name__)

FULL_READ_INTERVAL_S = 10.0
RETRY_S = 1.0
KEEP_NOTIFICATIONS = 100  # the newest change notifications kept; older ones are pruned
PRUNE_ABOVE = 200  # (Kafka expires them after 15 minutes)


class FollowedStore:
    """The life cycle and the following thread; a store says what `prepare` makes and what
    `refresh` reads (under `self._lock`, re-arming its watches with `self._watch`)."""

    what = "znodes"  # for the log lines

    def __init__(self, session: Session, on_change: Callable[[], None], thread_name: str):
        self.session = session
        self.on_change = on_change
        self.generation = 0
        self._lock = threading.Lock()  # one refresh at a time; the values swap whole
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> None:
        """Make the roots, read everything once, follow changes. Raises ZooKeeperUnavailable."""
        self.prepare()
        self.refresh()
        self._thread.start()

    def prepare(self) -> None:
        """The roots the store reads and writes under."""

    def refresh(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)

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
                    log.warning("%s not re-read: %s", self.what, exc)
                failing = True
                next_full = time.monotonic() + RETRY_S
            except Exception:  # keep following: a bad node is logged, the rest stays
                log.exception("%s not re-read", self.what)
                next_full = time.monotonic() + RETRY_S

    def conditional_write(self, path: str, write: Callable[[bytes | None], object]) -> bool:
        """`write(current data or None)` says the new data, None (delete the node) or False
        (no change); applied only if the node did not change meanwhile, else read again.
        True if written."""
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

    def notify(self, prefix: str, payload: bytes) -> None:
        """The change notification every broker watches, then our own re-read at once."""
        self.session.call("create", prefix, payload, sequence=True, makepath=True)
        directory = prefix.rsplit("/", 1)[0]
        children = sorted(self.session.call("get_children", directory))
        if len(children) > PRUNE_ABOVE:
            for child in children[:-KEEP_NOTIFICATIONS]:
                with contextlib.suppress(NoNodeError):
                    self.session.call("delete", f"{directory}/{child}")
        self.refresh()
