"""Whose disk is this: `meta.properties` in each log dir, as Kafka writes it.

A log dir records the cluster it belongs to and the node that owns it (`node_id_for`: node
id = broker.id * 100 + worker index, so an appliance runs at most 100 workers, one per disk).
A disk moved from another cluster or another node would otherwise be served as if its
partitions were ours: an appliance refuses to start on it, naming both ids. A log dir
without the file (a new disk, or one from before klog wrote it) is stamped at start.

The format is Kafka's ZooKeeper-mode v0: `version=0`, `broker.id=<node id>`, `cluster.id=...`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from appliance.properties import PropertiesError, parse_properties

META_FILE = "meta.properties"
NODES_PER_APPLIANCE = 100


def node_id_for(broker_id: int, worker_index: int) -> int:
    """The Kafka node id of a worker: every worker is advertised as its own broker."""
    return broker_id * NODES_PER_APPLIANCE + worker_index


class IdentityError(ValueError):
    """A log dir belongs to another cluster or node, or its meta.properties is unreadable."""


@dataclass(frozen=True)
class DiskIdentity:
    cluster_id: str
    node_id: int

    def to_properties(self) -> str:
        return (f"#Written by klog: do not edit\nversion=0\nbroker.id={self.node_id}\n"
                f"cluster.id={self.cluster_id}\n")


def read_identity(log_dir: Path) -> DiskIdentity | None:
    """The identity stamped on a log dir, None if it has none yet."""
    path = Path(log_dir) / META_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IdentityError(f"{path}: cannot read it: {exc.strerror}") from None
    try:
        values = parse_properties(text, source=str(path))
        return DiskIdentity(cluster_id=values["cluster.id"], node_id=int(values["broker.id"]))
    except (PropertiesError, KeyError, ValueError) as exc:
        raise IdentityError(f"{path}: not a meta.properties: {exc}") from None


def claim_log_dir(log_dir: Path, expected: DiskIdentity) -> None:
    """Stamp a new log dir with `expected`, or check that it already carries it."""
    found = read_identity(log_dir)
    path = Path(log_dir) / META_FILE
    if found is None:
        temporary = path.with_name(META_FILE + ".tmp")
        temporary.write_text(expected.to_properties())
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        return
    if found.cluster_id != expected.cluster_id:
        raise IdentityError(
            f"{log_dir} belongs to cluster {found.cluster_id!r}, but this appliance is in "
            f"cluster {expected.cluster_id!r} (see {path})")
    if found.node_id != expected.node_id:
        raise IdentityError(
            f"{log_dir} belongs to node {found.node_id}, but it is configured here for node "
            f"{expected.node_id} (check broker.id and the order of log.dirs; see {path})")
