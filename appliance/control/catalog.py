"""The topic catalog: every topic's partition count, config overrides and placement, on disk.

One JSON file per topic under `<first log dir>/.klog-catalog/`, written atomically (temp
file, fsync, rename, fsync of the directory), so a crash leaves either the old or the new
description, never half of one. The catalog belongs to the local decider, which runs in the
supervisor; workers learn its contents over the control channel, never from these files.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from pathlib import Path

from appliance.atomic_files import write_atomically
from appliance.control.topics import TopicInfo

CATALOG_DIR = ".klog-catalog"


class Catalog:
    """The persistent set of topics. Not thread-safe: the supervisor's loop owns it."""

    def __init__(self, root: Path):
        self.root = Path(root) / CATALOG_DIR
        self.root.mkdir(parents=True, exist_ok=True)
        self._topics: dict[str, TopicInfo] = {}
        self.problems: list[str] = []
        for path in sorted(self.root.glob("*.json")):
            try:
                info = TopicInfo.from_json(path.read_bytes(), source=str(path))
            except (OSError, ValueError) as exc:
                self.problems.append(str(exc))  # reported at start-up; the topic is skipped
                continue
            self._topics[info.name] = info

    def __contains__(self, name: str) -> bool:
        return name in self._topics

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def load_by_worker(self, workers: range) -> dict[int, int]:
        load = {w: 0 for w in workers}
        for info in self._topics.values():
            for owner in info.owners:
                if owner in load:
                    load[owner] += 1
        return load

    def put(self, info: TopicInfo) -> None:
        write_atomically(self.root / f"{info.name}.json", info.to_json())
        self._topics[info.name] = info

    def remove(self, name: str) -> None:
        self._topics.pop(name, None)
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{name}.json").unlink()


class ProducerIdBlocks:
    """Producer ids handed out in blocks whose end is written to disk before any id is used.

    A restarted appliance starts after the last block it wrote, so a new producer never gets
    the id of an old one whose sequences are still in the logs.
    """

    BLOCK = 1000

    def __init__(self, root: Path):
        self.path = Path(root) / CATALOG_DIR / "producer-id-block"
        try:
            self._end = int(self.path.read_text().strip())
        except FileNotFoundError:
            self._end = 0
        except ValueError as exc:
            raise ValueError(f"{self.path}: not a producer id block end: {exc}") from None
        self._next = self._end

    def allocate(self) -> int:
        if self._next >= self._end:
            self._end = self._next + self.BLOCK
            write_atomically(self.path, str(self._end).encode())
        producer_id = self._next
        self._next += 1
        return producer_id


def cluster_id(root: Path) -> str:
    """The appliance's cluster id, made once (Kafka's 22-character base64 UUID style)."""
    path = Path(root) / CATALOG_DIR / "cluster.id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        write_atomically(path, value.encode())
        return value
