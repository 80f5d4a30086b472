"""The replicas this worker holds: a `Partition` per (topic, partition) whose log is on its disk.

The worker is the single writer of every partition listed here, so nothing in this module
locks. It opens the partitions the controller places on this worker (recovering their logs,
claiming their shm slots), closes or deletes them with their topic, and deletes the replicas
a reassignment moved away as Kafka does: asynchronously (see `delete_moved`).

A partition whose log cannot be opened because the worker is out of descriptors (EMFILE,
issue 26) is not held but remembered in `unopened` with the reason: requests for it answer
KAFKA_STORAGE_ERROR naming the limit (retriable), the worker retries the opening now and then
(`unopened_topics`), and every other partition keeps being served. Any other storage error
while opening stays fatal as before.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterator

from appliance.control.topics import TopicInfo, topic_log_config
from appliance.segments import descriptor_limit
from appliance.segments.config import LogConfig
from appliance.segments.errors import StorageError
from appliance.segments.layout import fsync_directory, partition_dir
from appliance.segments.log import PartitionLog
from appliance.workers.replication.context import ReplicaContext
from appliance.workers.replication.partition import Partition

log = logging.getLogger(__name__)

# descriptors left free for connections when opening partitions (issue 26)
RESERVED_DESCRIPTORS = 64
LOGGED_REFUSALS = 5  # "not opened" lines per topic; the rest are counted in one line
DELETE_SUFFIX = "-delete"  # Kafka's: a log directory set aside, to be removed


class LocalReplicas:
    """The partitions this worker holds, keyed by (topic, index)."""

    def __init__(self, context: ReplicaContext, defaults: LogConfig, *,
                 ask_isr: Callable[[Partition, tuple[int, ...]], None]):
        self.context = context
        self.log_dir = context.log_dir
        self.defaults = defaults  # the broker's log defaults (a SIGHUP may change them)
        self._ask_isr = ask_isr
        self._held: dict[tuple[str, int], Partition] = {}
        self._flushing: list[Partition] | None = None  # see flushing(); None: to compute
        self._retired: list[tuple[int, PartitionLog]] = []  # (remove at ms, log): moved away
        self.unopened: dict[tuple[str, int], str] = {}  # owned, out of descriptors: why

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._held.values()))

    def get(self, topic: str, index: int) -> Partition | None:
        return self._held.get((topic, index))

    def flushing(self) -> list[Partition]:
        """The partitions whose logs have flush.messages or flush.ms: the only ones the
        worker's flush timer asks, ten times a second. None at Kafka's defaults, where a walk
        of every partition was most of what an idle worker cost. Kept until a partition opens
        or goes, or a log's config changes."""
        if self._flushing is None:
            self._flushing = [p for p in self._held.values() if p.log.flushes_on_policy]
        return self._flushing

    def open_topic(self, info: TopicInfo, *, now_ms: int,
                   indexes: tuple[int, ...] | None = None) -> None:
        """Open (or create) the logs of the topic's partitions that this worker holds; those
        that would leave fewer than RESERVED_DESCRIPTORS free (or hit EMFILE) stay unopened.
        `indexes`: only those partitions changed (the topic's configs did not)."""
        config = topic_log_config(self.defaults, info.configs)
        publisher = self.context.publisher
        room = None  # listed when the first log is to be opened (each takes one more): a
        # change that opens nothing, most of them, costs no listing of this worker's
        # thousands of descriptors (1 ms per 5,000, per topic change)
        refused = 0
        for index in range(len(info.owners)) if indexes is None else indexes:
            owner = info.owners[index]
            key = (info.name, index)
            held = self._held.get(key)
            if held is not None and held.log.config != config:
                held.log.reconfigure(config)  # its configs changed (AlterConfigs)
                self._flushing = None
            if owner != self.context.worker_index or held is not None:
                continue
            if room is None:
                room = descriptor_limit.room()
            if room - 1 < RESERVED_DESCRIPTORS:
                refused += self._not_opened(key, f"{RESERVED_DESCRIPTORS} descriptors kept "
                                                 f"for connections: {descriptor_limit.note()}",
                                            refused)
                continue
            directory = partition_dir(self.log_dir, info.name, index)
            try:
                plog = PartitionLog.open(directory, config, now_ms=now_ms,
                                         attach=publisher.attach_point(info.name, index))
            except StorageError as exc:
                if not exc.out_of_descriptors:
                    raise
                refused += self._not_opened(key, str(exc), refused)
                continue
            try:
                self._flushing = None
                self._held[key] = Partition(info.name, index, plog, self.context,
                                            ask_isr=self._ask_isr)
            except StorageError as exc:
                plog.segments.close_all()
                if not exc.out_of_descriptors:
                    raise
                refused += self._not_opened(key, str(exc), refused)
                continue
            room -= 1
            if self.unopened.pop(key, None) is not None:
                log.info("%s-%d opened after all", *key)
        if refused > LOGGED_REFUSALS:
            log.error("%s: %d more partition(s) not opened for want of descriptors",
                      info.name, refused - LOGGED_REFUSALS)

    def _not_opened(self, key: tuple[str, int], reason: str, logged: int) -> int:
        """Remember why; log the first few of a topic (a line each, no traceback)."""
        if key not in self.unopened and logged < LOGGED_REFUSALS:
            log.error("%s-%d not opened: %s", *key, reason)
        new = key not in self.unopened
        self.unopened[key] = reason
        return 1 if new else 0

    def unopened_topics(self) -> list[str]:
        """Topics with partitions this worker owns but could not open (to retry)."""
        return sorted({name for name, _ in self.unopened})

    def unopened_reason(self, topic: str, index: int) -> str | None:
        return self.unopened.get((topic, index))

    def reconfigure(self, topics: list[TopicInfo]) -> None:
        """The broker's log defaults changed: every held log takes its effective config."""
        for info in topics:
            try:
                config = topic_log_config(self.defaults, info.configs)
            except ValueError as exc:  # the topic's overrides no longer fit: keep its config
                log.error("%s keeps its log config: %s", info.name, exc)
                continue
            for key, partition in self._held.items():
                if key[0] == info.name and partition.log.config != config:
                    partition.log.reconfigure(config)
                    self._flushing = None

    def close_topic(self, name: str, *, delete: bool) -> None:
        for key in [k for k in self.unopened if k[0] == name]:
            del self.unopened[key]
        for key in [k for k in self._held if k[0] == name]:
            self._held.pop(key).close(delete=delete)
            self._flushing = None

    def delete_moved(self, info: TopicInfo, *, now_ms: int,
                     indexes: tuple[int, ...] | None = None) -> list[int]:
        """Delete the logs of the topic's partitions this worker no longer holds: a
        reassignment moved the replica away (Kafka's StopReplica with delete). As Kafka
        deletes a log, asynchronously: its directory is renamed aside at once
        (`<topic>-<partition>.<id>-delete`), so the partition may come back here as a new
        log, and its files stay open for `file.delete.delay.ms` (Fetch responses in flight
        send from them) before `remove_retired` removes them. `indexes`: only those partitions
        changed. Returns the indexes deleted."""
        worker_index = self.context.worker_index
        if indexes is not None:  # only those changed: look at them, not at every log held
            moved = [(info.name, i) for i in indexes if (info.name, i) in self._held and
                     info.owners[i] != worker_index]
        else:
            moved = [key for key in self._held if key[0] == info.name and
                     (key[1] >= len(info.owners) or info.owners[key[1]] != worker_index)]
        for key in moved:
            plog = self._held.pop(key).log
            self._flushing = None
            aside = f"{plog.directory}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            try:
                os.rename(plog.directory, aside)
                fsync_directory(str(self.log_dir))
            except OSError as exc:
                log.error("%s-%d moved away, but its log cannot be renamed aside (%s): "
                          "deleting it now", *key, exc)
                self._remove(plog)
                continue
            plog.directory = aside  # whatever it still writes goes there
            self._retired.append((now_ms + plog.config.file_delete_delay_ms, plog))
        return [index for _, index in moved]

    def remove_retired(self, *, now_ms: int | None = None) -> None:
        """Remove the logs `delete_moved` set aside whose delay is over (all: None)."""
        due = [r for r in self._retired if now_ms is None or r[0] <= now_ms]
        for entry in due:
            self._retired.remove(entry)
            self._remove(entry[1])

    def remove_deleted_leftovers(self) -> None:
        """At start: logs set aside by an earlier life that did not live to remove them."""
        for path in self.log_dir.glob(f"*{DELETE_SUFFIX}"):
            if path.is_dir():
                log.info("removing %s, set aside for deletion before a restart", path)
                shutil.rmtree(path, ignore_errors=True)

    @staticmethod
    def _remove(plog: PartitionLog) -> None:
        try:
            plog.delete()
        except StorageError as exc:
            log.error("%s stays: %s", plog.directory, exc)

    def close(self) -> None:
        for partition in self._held.values():
            partition.close()
        self._held.clear()
        self._flushing = None
        self.remove_retired()
