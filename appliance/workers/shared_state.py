"""The worker's side of the shared-memory region: publishing what it owns, reading the rest.

An owner publishes each partition's state (offsets, active segment, new sparse index entries,
counters) after every append, roll and retention pass, so that any worker of the appliance can
answer a Fetch for it: `RemoteLog` reads the published numbers from the region and sends
whole batches straight from the owner's segment files (opened read-only), never past the
published high watermark. Writes stay single-writer; reads fan out over CPU cores.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from appliance.segments import EMPTY_SLICE, txn_index
from appliance.segments.layout import partition_dir
from appliance.segments.log import AttachPoint
from appliance.segments.non_owner_reader import PartitionReader
from appliance.shm.partition_table import FreeSlotError
from appliance.shm.seqlock import TornEntryError

log = logging.getLogger(__name__)


class NotPublishedError(LookupError):
    """The partition's owner has not opened it yet: a retriable condition for the client."""


@dataclass
class Publication:
    """Where an owned partition publishes, and how much of its index ring is already out."""

    slot: int
    epoch: int
    active_base: int = -1
    index_count: int = 0


class Publisher:
    """Mirrors the logs of the owned partitions into their region slots."""

    def __init__(self, region, worker_index: int):
        self.region = region
        self.worker_index = worker_index

    def attach_point(self, topic: str, index: int) -> AttachPoint | None:
        """What this worker's previous incarnation last published for the partition."""
        slot = self.region.partitions.find(topic, index)
        if slot is None:
            return None
        try:
            view = self.region.partitions.read_partition(slot)
        except (TornEntryError, FreeSlotError):
            return None  # killed mid-publish: the engine recovers the tail the normal way
        if view.owner != self.worker_index or not view.published:
            return None
        return AttachPoint(view.log_end_offset, view.active_segment_base_offset,
                           view.active_segment_bytes)

    def start(self, topic: str, index: int, partition_log) -> Publication | None:
        """Claim the partition's slot and (re)write its whole entry."""
        table = self.region.partitions
        slot = table.find(topic, index)
        if slot is None:
            log.warning("%s-%d has no shared-memory slot: only its owner serves it", topic,
                        index)
            return None
        epoch = table.slot_info(slot).epoch
        snap = partition_log.snapshot()
        entries = partition_log.active_index_entries()
        table.rewrite_partition(slot, epoch, snap.log_start_offset, snap.high_watermark,
                                snap.log_end_offset, snap.active_base_offset, snap.active_bytes,
                                partition_log.size_bytes, entries,
                                last_stable_offset=partition_log.last_stable_offset,
                                aborted_txns=partition_log.aborted_txns)
        self.region.workers.note_published(self.worker_index)
        return Publication(slot, epoch, snap.active_base_offset, len(entries))

    def publish(self, publication: Publication | None, partition_log, records_in: int = 0,
                bytes_in: int = 0) -> None:
        """After a change: the new offsets and only the index entries not yet out."""
        if publication is None:
            return
        snap = partition_log.snapshot()
        first = publication.index_count
        count = partition_log.active_index_count
        if snap.active_base_offset != publication.active_base or count < first:
            first = 0  # a roll or a truncation: the ring starts over
        entries = partition_log.active_index_entries(first) if count > first else ()
        try:
            self.region.partitions.publish_partition(
                publication.slot, publication.epoch, snap.log_start_offset,
                snap.high_watermark, snap.log_end_offset, snap.active_base_offset,
                snap.active_bytes, partition_log.size_bytes, entries, records_in, bytes_in,
                last_stable_offset=partition_log.last_stable_offset,
                aborted_txns=partition_log.aborted_txns)
        except FreeSlotError:
            return  # the topic was deleted meanwhile; the catalog broadcast follows
        self.region.workers.note_published(self.worker_index)
        publication.active_base = snap.active_base_offset
        publication.index_count = count


class RemoteLog:
    """A partition owned by another worker, with the read side of PartitionLog's interface."""

    def __init__(self, region, slot: int, reader: PartitionReader, worker_index: int):
        self.region = region
        self.slot = slot
        self.reader = reader
        self.worker_index = worker_index
        self.view = region.partitions.read_partition(slot)

    @property
    def high_watermark(self) -> int:
        return self.view.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.view.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        return self.view.last_stable_offset

    def region_handed_out(self) -> None:
        """A read of this log leaves by sendfile from the reader's descriptor (fetch.py): a
        retirement of the reader must then wait its grace before closing it."""
        self.reader.region_at = time.monotonic()  # RemoteLogs' clock in a worker

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list:
        if not self.view.aborted_txns:
            return []  # nothing was ever aborted here: no .txnindex file to look for
        return txn_index.collect(self.reader.directory, fetch_offset, upper_offset)

    def read(self, offset: int, max_bytes: int, *, committed: bool = False):
        view = self.view
        if not view.published:
            raise NotPublishedError(f"{view.topic}-{view.partition}: its owner has not "
                                    f"published it yet")
        if offset == (view.last_stable_offset if committed else view.high_watermark) and \
                offset >= view.log_start_offset:
            return EMPTY_SLICE  # where an idle consumer waits: nothing to look up or open
        hint = view.lookup(offset)
        # bounded by the log end, not the high watermark: a fetch between the two (a leader
        # just elected, whose high watermark lags what consumers read) is an empty answer
        piece = self.reader.read(offset, max_bytes, log_start_offset=view.log_start_offset,
                                 high_watermark=view.high_watermark,
                                 log_end_offset=view.log_end_offset,
                                 active_base_offset=view.active_segment_base_offset,
                                 active_bytes=view.active_segment_bytes,
                                 hint=tuple(hint) if hint is not None else None,
                                 last_stable_offset=view.last_stable_offset if committed
                                 else None)
        if piece:
            self.region.fetch_out.add_partition_out(self.slot, view.epoch, self.worker_index,
                                                    piece.length, 0)
        return piece


class RemoteLogs:
    """Read-only access to the partitions of the other workers of this appliance.

    A reader holds descriptors of the segments it read (non_owner_reader.py), so one per
    partition ever read would grow with the partitions of the appliance, idle ones included
    (klog's client spreads its reads over every worker). The readers are kept for the
    `max_readers` most recently read partitions (`bound`: the worker sets it from its
    descriptor budget, as it bounds its own sealed segments); an older one is retired. Its
    descriptors are closed at once, unless a read of it left by sendfile (a large read; a
    small one is copied into the response) within `grace_s`: then `grace_s` later
    (`close_due`), so that the response sending from them completes, the rule retention
    follows for deleted segments."""

    def __init__(self, region, log_dirs, worker_index: int, *,
                 max_readers: int = 1 << 30, grace_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.region = region
        self.log_dirs = log_dirs
        self.worker_index = worker_index
        self.max_readers = max_readers
        self.grace_s = grace_s
        self.retired_readers = 0  # readers retired for the bound, since start
        self._clock = clock
        self._readers: OrderedDict[tuple[str, int, int], PartitionReader] = OrderedDict()
        self._retiring: deque[tuple[float, PartitionReader]] = deque()

    def bound(self, max_readers: int, grace_s: float) -> None:
        self.max_readers, self.grace_s = max(max_readers, 1), max(grace_s, 0.0)
        self._retire_over()

    def __len__(self) -> int:
        return len(self._readers)

    def get(self, topic: str, index: int) -> RemoteLog | None:
        slot = self.region.partitions.find(topic, index)
        if slot is None:
            return None
        try:
            view_owner = self.region.partitions.slot_info(slot).owner
            key = (topic, index, view_owner)
            reader = self._readers.get(key)
            if reader is None:
                directory = partition_dir(self.log_dirs[view_owner], topic, index)
                reader = self._readers[key] = PartitionReader(directory)
                self._retire_over()
            else:
                self._readers.move_to_end(key)
            return RemoteLog(self.region, slot, reader, self.worker_index)
        except (TornEntryError, FreeSlotError):
            return None

    def _retire_over(self) -> None:
        now = self._clock()
        while len(self._readers) > self.max_readers:
            _, reader = self._readers.popitem(last=False)
            self.retired_readers += 1
            sent_at = reader.region_at
            if sent_at is None or now - sent_at >= self.grace_s:
                reader.close()  # nothing of it can be in flight
            else:
                self._retiring.append((now + self.grace_s, reader))

    def close_due(self) -> None:
        """Close the retired readers whose grace is over (the worker's periodic loop)."""
        now = self._clock()
        while self._retiring and self._retiring[0][0] <= now:
            self._retiring.popleft()[1].close()

    def forget_moved(self, topic: str, owners: tuple[int, ...]) -> None:
        """Close the readers of partitions whose owner is no longer the one they read (a
        reassignment moved them): their files are deleted, and would stay open otherwise."""
        for key in [k for k in self._readers if k[0] == topic and
                    (k[1] >= len(owners) or owners[k[1]] != k[2])]:
            self._readers.pop(key).close()

    def forget(self, topic: str) -> None:
        for key in [k for k in self._readers if k[0] == topic]:
            self._readers.pop(key).close()

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        while self._retiring:
            self._retiring.popleft()[1].close()
