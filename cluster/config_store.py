"""The fleet's dynamic configs of brokers, clients and users in ZooKeeper, as Kafka keeps them.

`/config/<entity-type>/<sanitized name>` holds `{"version": 1, "config": {...}}`; a user's
client ids are under `/config/users/<user>/clients/<client>`. Every write is followed by
Kafka's change notification (`/config/changes/config_change_<seq>`, entity_path
"<type>/<name>"), which every appliance's store watches: it then re-reads every entity (they
are few) and, when something changed, bumps `generation` and calls `on_change` (on the
store's thread: hand it on, do not block). A periodic full read stands under the watch, as
in `security_store`; both are `followed_store.FollowedStore`s. The SCRAM credentials Kafka
keeps in the same user znodes are left as they are and never reported here.

Names are sanitized for paths as Kafka's Sanitizer does (URL-encoding), and given back raw.
This package does not import the appliance: values are plain dicts of strings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import quote, unquote

import orjson

from cluster.followed_store import FollowedStore
from cluster.session import NoNodeError, Session

log = logging.getLogger(__name__)

ROOT = "/config"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
TYPES = ("brokers", "clients", "users")
DEFAULT = "<default>"  # Kafka writes the default entity's name unsanitized
SCRAM_PREFIX = "SCRAM-"  # credentials in /config/users/<u>: security_store's, not ours

Entities = dict[str, dict[str, dict[str, str]]]


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encoding (Java's URLEncoder, with "*" and " " as %2A and %20)."""
    return name if name == DEFAULT else quote(name, safe="").replace("~", "%7E")


def entity_path(entity_type: str, name: str) -> str:
    """`users/<u>/clients` + `c` -> /config/users/<sanitized u>/clients/<sanitized c>."""
    parts = entity_type.split("/")
    if not (entity_type in TYPES or (len(parts) == 3 and parts[0] == "users" and parts[1]
                                     and parts[2] == "clients")):
        raise ValueError(f"unknown entity type {entity_type!r}")
    if len(parts) == 3:
        parts[1] = sanitize(parts[1])
    return f"{ROOT}/{'/'.join(parts)}/{sanitize(name)}"


def _config(data: bytes | None, path: str) -> dict[str, str]:
    if not data:
        return {}
    try:
        config = orjson.loads(data).get("config", {})
    except (orjson.JSONDecodeError, AttributeError):
        log.error("%s: not a config znode", path)
        return {}
    return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}


class FleetConfigStore(FollowedStore):
    what = "dynamic configs"

    def __init__(self, session: Session, on_change: Callable[[], None] = lambda: None):
        super().__init__(session, on_change, "klog-fleet-configs")
        self._entities: Entities = {}

    def prepare(self) -> None:
        for path in (CHANGES, *(f"{ROOT}/{t}" for t in TYPES)):
            self.session.call("ensure_path", path)

    def entities(self) -> Entities:
        return {t: {n: dict(c) for n, c in names.items()} for t, names in self._entities.items()}

    # reading ------------------------------------------------------------------------------

    def refresh(self) -> None:
        with self._lock:
            self.session.call("get_children", CHANGES, watch=self._watch)
            entities = self._read()
            if entities == self._entities:
                return
            self._entities = entities
            self.generation += 1
        self.on_change()

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.session.call("get_children", path))
        except NoNodeError:
            return []

    def _read(self) -> Entities:
        wanted: list[tuple[str, str, str]] = []  # (type, raw name, path)
        for entity_type in TYPES:
            for child in self._children(f"{ROOT}/{entity_type}"):
                wanted.append((entity_type, unquote(child), f"{ROOT}/{entity_type}/{child}"))
                if entity_type == "users":
                    nested = f"{ROOT}/users/{child}/clients"
                    wanted += [(f"users/{unquote(child)}/clients", unquote(c), f"{nested}/{c}")
                               for c in self._children(nested)]
        entities: Entities = {}
        got = self.session.get_many([path for _, _, path in wanted])
        for (entity_type, name, path), found in zip(wanted, got, strict=True):
            if found is None:
                continue
            config = {k: v for k, v in _config(found[0], path).items()
                      if not k.startswith(SCRAM_PREFIX)}
            if config:
                entities.setdefault(entity_type, {})[name] = config
        return entities

    # writing ------------------------------------------------------------------------------

    def alter(self, entity_type: str, name: str, changes: dict[str, str | None]) -> None:
        """Apply `changes` (None removes a key) to one entity with a conditional write, then
        Kafka's change notification and our own re-read. Raises ZooKeeperUnavailable,
        ValueError (an entity type the store does not keep)."""
        path = entity_path(entity_type, name)

        def write(data: bytes | None):
            current = _config(data, path)
            new = dict(current)
            for key, value in changes.items():
                if value is None:
                    new.pop(key, None)
                else:
                    new[key] = value
            # an emptied node stays (children may hang below it), as Kafka's
            return False if new == current else orjson.dumps({"version": 1, "config": new})
        if self.conditional_write(path, write):
            self.notify(f"{CHANGES}/{CHANGE_PREFIX}",
                        orjson.dumps({"version": 2, "entity_path": path[len(ROOT) + 1:]}))
