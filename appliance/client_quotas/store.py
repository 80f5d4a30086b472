"""Where client quotas live: the small interface the workers' enforcement and the two APIs use,
and the appliance-local file store behind it until the dynamic config store (`configs`'
branch, ZooKeeper's /config/users and /config/clients in a fleet) takes its place.

`FileQuotaStore` keeps every entity's values in one JSON file next to the catalog
(`<log.dirs[0]>/client-quotas.json`), written atomically under an exclusive lock (two workers
may alter at once). Each worker reads it again when its modification time changes, checked at
most every REFRESH_INTERVAL_S, so a change reaches every worker of the appliance within that
time and survives a restart. A fleet's appliances each keep their own file: quotas set through
one appliance do not reach the others yet.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Protocol

from appliance.atomic_files import write_atomically
from appliance.client_quotas.entities import Entity, entity

log = logging.getLogger(__name__)

FILE_NAME = "client-quotas.json"
REFRESH_INTERVAL_S = 0.5


class QuotaStore(Protocol):
    version: int  # changes whenever the quotas do

    def quotas(self) -> dict[Entity, dict[str, float]]:
        """Every entity with at least one value (cheap: the store's current view)."""

    def refresh(self, now_s: float) -> None:
        """Pick up changes made elsewhere (another worker, another node)."""

    def alter(self, changes: dict[Entity, dict[str, float]]) -> None:
        """Give each entity these values (an empty dict removes the entity); raises OSError
        when they cannot be stored."""


def _decode(data: bytes) -> dict[Entity, dict[str, float]]:
    doc = json.loads(data or b"{}")
    return {entity((t, n) for t, n in e["entity"]): {k: float(v) for k, v in e["values"].items()}
            for e in doc.get("entities", []) if e.get("values")}


def _encode(quotas: dict[Entity, dict[str, float]]) -> bytes:
    return json.dumps({"entities": [{"entity": [list(p) for p in ent], "values": values}
                                    for ent, values in sorted(quotas.items(), key=str)]},
                      indent=1).encode()


class FileQuotaStore:
    def __init__(self, directory: Path, clock=time.monotonic):
        self.path = Path(directory) / FILE_NAME
        self.clock = clock
        self.version = 0
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._stamp: tuple[int, int] | None = None
        self._next_check = 0.0
        self._load()

    def quotas(self) -> dict[Entity, dict[str, float]]:
        return self._quotas

    def refresh(self, now_s: float | None = None) -> None:
        now_s = self.clock() if now_s is None else now_s
        if now_s < self._next_check:
            return
        self._next_check = now_s + REFRESH_INTERVAL_S
        self._load()

    def force_refresh(self) -> None:
        self._next_check = 0.0
        self.refresh()

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            stamp = None
        else:
            stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            quotas = _decode(self.path.read_bytes()) if stamp is not None else {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("cannot read %s: %s (keeping the quotas known before)", self.path, exc)
            return
        self._stamp = stamp
        if quotas != self._quotas:
            self._quotas = quotas
            self.version += 1

    def alter(self, changes: dict[Entity, dict[str, float]]) -> None:
        lock_path = self.path.with_name(f".{FILE_NAME}.lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._stamp = None  # read what another worker may have just written
            self._load()
            quotas = dict(self._quotas)
            for ent, values in changes.items():
                if values:
                    quotas[ent] = dict(values)
                else:
                    quotas.pop(ent, None)
            write_atomically(self.path, _encode(quotas))
            self._stamp = None
            self._load()
        finally:
            os.close(fd)
