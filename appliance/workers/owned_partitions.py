"""The partitions a worker owns: their logs, their producers, and appends with Kafka's rules.

The worker is the single writer of every partition listed here, so nothing in this module
locks. An append checks idempotent-producer sequences per batch, appends through the storage
engine, records the producer state, and wakes fetches waiting on the partition. Reading is
left to the Fetch handler, which asks for a `ReadSlice` and sends it with sendfile.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from appliance.controller.topics import TopicInfo, topic_log_config
from appliance.segments.config import LogConfig
from appliance.segments.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    StorageError,
)
from appliance.segments.layout import fsync_directory, partition_dir
from appliance.segments.log import PartitionLog
from appliance.workers.producer_state import ProducerStates, Verdict
from appliance.workers.shared_state import Publisher
from klog.protocol.error_codes import ErrorCode
from klog.protocol.record_batch import CorruptBatchError, scan_batches

log = logging.getLogger(__name__)

DELETE_SUFFIX = "-delete"  # Kafka's: a log directory set aside, to be removed


@dataclass
class OwnedPartition:
    topic: str
    index: int
    log: PartitionLog
    producers: ProducerStates
    publication: object = None  # where the shm region mirrors it (shared_state.Publication)
    leader_epoch: int | None = None  # replicated and led here: stamped into appended batches


@dataclass(frozen=True)
class AppendOutcome:
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None


class OwnedPartitions:
    """The partitions this worker owns, keyed by (topic, index)."""

    def __init__(self, log_dir: Path, defaults: LogConfig, *, worker_index: int = 0,
                 publisher: Publisher, on_append=None):
        self.log_dir = Path(log_dir)
        self.defaults = defaults
        self.worker_index = worker_index
        self._owned: dict[tuple[str, int], OwnedPartition] = {}
        self._retired: list[tuple[int, PartitionLog]] = []  # (remove at ms, log): moved away
        self._on_append = on_append or (lambda topic, index: None)
        self.publisher = publisher

    def __len__(self) -> int:
        return len(self._owned)

    def __iter__(self):
        return iter(self._owned.values())

    def get(self, topic: str, index: int) -> OwnedPartition | None:
        return self._owned.get((topic, index))

    def open_topic(self, info: TopicInfo, *, now_ms: int) -> None:
        """Open (or create) the logs of the topic's partitions that this worker owns."""
        config = topic_log_config(self.defaults, info.configs)
        for index, owner in enumerate(info.owners):
            if owner != self.worker_index or (info.name, index) in self._owned:
                continue
            directory = partition_dir(self.log_dir, info.name, index)
            attach = self.publisher.attach_point(info.name, index)
            partition_log = PartitionLog.open(directory, config, now_ms=now_ms,
                                              attach=attach)
            producers = ProducerStates()
            for _, header in partition_log.iter_batch_headers():
                producers.record(header, header.base_offset)
            owned = OwnedPartition(info.name, index, partition_log, producers)
            owned.publication = self.publisher.start(info.name, index, partition_log)
            self._owned[(info.name, index)] = owned

    def publish(self, owned: OwnedPartition, records_in: int = 0, bytes_in: int = 0) -> None:
        """Mirror a partition's new state into the shm region (after appends and retention)."""
        self.publisher.publish(owned.publication, owned.log, records_in, bytes_in)

    def close_topic(self, name: str, *, delete: bool) -> None:
        for key in [k for k in self._owned if k[0] == name]:
            owned = self._owned.pop(key)
            if delete:
                owned.log.delete()
            else:
                owned.log.close()

    def delete_moved(self, info: TopicInfo, *, now_ms: int) -> list[int]:
        """Delete the logs of the topic's partitions this worker no longer holds: a
        reassignment moved the replica away (Kafka's StopReplica with delete). As Kafka
        deletes a log, asynchronously: its directory is renamed aside at once
        (`<topic>-<partition>.<id>-delete`), so the partition may come back here as a new
        log, and its files stay open for `file.delete.delay.ms` (Fetch responses in flight
        send from them) before `remove_retired` removes them. Returns the indexes."""
        moved = [key for key in self._owned if key[0] == info.name and
                 (key[1] >= len(info.owners) or info.owners[key[1]] != self.worker_index)]
        for key in moved:
            plog = self._owned.pop(key).log
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
        for owned in self._owned.values():
            owned.log.close()
        self._owned.clear()
        self.remove_retired()

    def append(self, topic: str, index: int, records, *, now_ms: int) -> AppendOutcome:
        """Append a Produce request's records to one partition, with idempotence checks."""
        owned = self._owned.get((topic, index))
        if owned is None:
            return AppendOutcome(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if records is None or len(records) == 0:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message="empty records")
        try:
            headers = [h for _, h in scan_batches(records, verify_crc=False)]
        except CorruptBatchError as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        if not headers:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message="no whole batch in records")
        producers = owned.producers
        verdicts = [producers.check(h) for h in headers]
        if len(headers) == 1 and verdicts[0][0] is Verdict.DUPLICATE:
            cached = verdicts[0][1]
            return AppendOutcome(base_offset=cached.base_offset, last_offset=cached.last_offset,
                                 log_append_time_ms=cached.log_append_time_ms,
                                 log_start_offset=owned.log.log_start_offset)
        for verdict, _ in verdicts:
            if verdict is Verdict.FENCED:
                return AppendOutcome(ErrorCode.INVALID_PRODUCER_EPOCH)
            if verdict is not Verdict.APPEND:
                return AppendOutcome(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        try:
            info = owned.log.append(records, now_ms=now_ms, leader_epoch=owned.leader_epoch)
        except CorruptRecordError as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        except CorruptBatchError as exc:
            return AppendOutcome(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        except RecordTooLargeError as exc:
            return AppendOutcome(ErrorCode.MESSAGE_TOO_LARGE, message=str(exc))
        except StorageError as exc:
            log.error("append to %s-%d failed: %s", topic, index, exc)
            return AppendOutcome(ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
        offset = info.base_offset
        for header in headers:
            producers.record(header, offset, info.log_append_time_ms)
            offset += header.last_offset_delta + 1
        self.publish(owned, info.record_count, len(records))
        self._on_append(topic, index)
        return AppendOutcome(base_offset=info.base_offset, last_offset=info.last_offset,
                             log_append_time_ms=info.log_append_time_ms,
                             log_start_offset=owned.log.log_start_offset)
