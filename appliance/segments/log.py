"""PartitionLog: one partition's log of segments. The storage engine's public class.

What it owns: the segments of ``<log.dir>/<topic>-<partition>/``, the offsets (log start, high
watermark, log end), appends (validate every batch, assign offsets by patching ``baseOffset``,
stamp LogAppendTime, roll), reads as ``(fd, position, length)`` for ``os.sendfile``, lookups by
offset and timestamp, durability (``flush.messages`` / ``flush.ms``, group commit), retention,
truncation and deletion. Batches stay opaque: per batch, never per record.

Who may call what:

- One **writer thread** (the worker's event loop) calls everything, except that
- :meth:`flush_through` and :attr:`recovery_point` may be used from any thread: the group
  commit thread does. ``flush_through`` holds the segment list's lock while it fsyncs; the few
  writer operations that close descriptors (retention's delayed deletes, truncation, close,
  delete) take it too. Appends and reads never take it.

Error rules: a :class:`StorageError` from an append leaves the log as it was before the call
(nothing published; a failed roll leaves the old segment active) and the next append retries.
If the write succeeded but the ``flush.messages`` flush failed, the batches stay appended and
readable, the StorageError says the flush failed, and they are not counted as durable.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from typing import NamedTuple

from klog.protocol import record_batch as rb

from . import cleaning_swap, faults, log_reads, policy, retention, txn_index
from .attach import AttachPoint
from .config import LONG_MAX, LogConfig
from .errors import CorruptRecordError, LogClosedError, StorageError, storage_errors
from .layout import fsync_directory, write_state
from .leader_epochs import LeaderEpochCache
from .log_loader import load_segments
from .log_reads import EMPTY_SLICE, BatchPosition, ReadSlice
from .recovery_scan import RecoveryReport
from .segment import LogSegment
from .segment_list import SegmentList
from .txn_index import AbortedTxn
from .validation import validate_append

__all__ = ["EMPTY_SLICE", "AppendInfo", "AttachPoint", "BatchPosition", "LogSnapshot",
           "PartitionLog", "ReadSlice"]

log = logging.getLogger("klog.segments")


class AppendInfo(NamedTuple):
    """What an append did; the numbers a Produce response carries."""

    base_offset: int  # offset of the first record appended
    last_offset: int  # offset of the last record appended
    log_append_time_ms: int  # the stamped time, or -1 under CreateTime
    record_count: int
    batch_count: int
    log_start_offset: int


class LogSnapshot(NamedTuple):
    """The published state of a log; field names match PartitionReader.read's keywords."""

    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    active_base_offset: int
    active_bytes: int  # valid bytes of the active segment (a batch boundary)

    def attach_point(self) -> AttachPoint:
        return AttachPoint(self.log_end_offset, self.active_base_offset, self.active_bytes)


class PartitionLog:
    """Open with :meth:`open`; see the module docstring for threads and errors."""

    def __init__(self, directory: str, config: LogConfig, segments: list[LogSegment],
                 recovery: RecoveryReport, log_start_offset: int, now_ms: int,
                 recovery_point: int | None = None):
        self.directory = directory
        self.config = config
        self.recovery = recovery
        self.last_retention: policy.RetentionPlan | None = None
        # The segment list and the two setters below are shared with the engine's own read and
        # retention modules (log_reads.py, retention.py: this class's methods, kept apart); code
        # outside appliance.segments uses the methods instead.
        self.segments = SegmentList(segments, directory)
        self._log_end_offset = self._high_watermark = self.segments.active.next_offset
        self._log_start_offset = log_start_offset
        self._recovery_point = self._log_end_offset if recovery_point is None else recovery_point
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        # without flush.messages or flush.ms (Kafka's defaults) the worker's timer skips it
        self.flushes_on_policy = config.flush_messages < LONG_MAX or config.flush_ms < LONG_MAX
        self._closed = False
        # Replication holds the high watermark back (leader: until the ISR has the records;
        # follower: until its leader says so); alone, it follows the log end.
        self.hold_high_watermark = False
        self._epochs: LeaderEpochCache | None = None
        # Transactions (KIP-98): the first offset of the earliest open transaction, which
        # holds read_committed consumers back, and how many aborted ones the .txnindex files
        # hold (0: no file to read). The producer state sets them; the log only applies them.
        self.first_unstable_offset: int | None = None
        self.aborted_txns = 0
        # the log cleaner (cleaner.py): a job promotes its cleaned files under this lock only
        # if no truncation happened since it started; truncations count here
        self.cleaning_lock = threading.Lock()
        self.truncations = 0
        self._end_cuts = 0  # moves of the log end down (set_end_offsets): see unsynced_end

    @classmethod
    def open(cls, directory: str, config: LogConfig, *, now_ms: int, verify: str = "tail",
             attach: AttachPoint | None = None) -> PartitionLog:
        """Open (creating the directory if missing) and recover the log; ``.recovery`` says what
        recovery did. ``verify="full"`` validates every batch (slow; for suspected corruption).
        ``attach``: the numbers the log's previous owner published after its last append
        (a worker restarted on a machine that stayed up): everything below them is trusted,
        only what follows is validated (``attach.py``); if the files disagree, the normal
        recovery runs and ``.recovery.attach_refused`` says why. An attached log claims nothing
        durable: its first flush fdatasyncs every segment. Raises StorageError."""
        with storage_errors(directory, "open the log"):
            os.makedirs(directory, exist_ok=True)
            segments, report, saved = load_segments(directory, config, now_ms=now_ms,
                                                    verify=verify, attach=attach)
        end = segments[-1].next_offset
        start = min(max(saved or 0, segments[0].base_offset), end)
        report.log_start_offset, report.log_end_offset = start, end
        plog = cls(directory, config, segments, report, start, now_ms,
                   recovery_point=start if report.attached else None)
        try:
            if not _state_already_says(report, start, segments[0].base_offset):
                plog._write_state(clean_shutdown=False)
        except StorageError:
            plog.segments.close_all()
            raise
        if report.changed:
            log.log(logging.ERROR if report.corrupt_in_middle else logging.WARNING, "%s", report)
        return plog

    # -- offsets ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        """What consumers may read. Equals the log end offset for single-copy logs; a separate
        notion so that replication can hold it back."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read: the high watermark, or the first offset of
        the earliest open transaction below it."""
        first = self.first_unstable_offset
        hwm = self._high_watermark
        return hwm if first is None or first >= hwm else first

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap [fetch_offset, upper_offset), from the
        segments' .txnindex files (txn_index.py). Raises StorageError."""
        if not self.aborted_txns:
            return []
        with storage_errors(self.directory, "read the .txnindex files of"):
            return txn_index.collect(self.directory, fetch_offset, upper_offset)

    def add_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index a transaction whose ABORT marker was just appended (in the active segment).
        Raises StorageError."""
        with storage_errors(self.directory, "write the .txnindex of"):
            txn_index.append(self.directory, self.segments.active.base_offset, entry)
        self.aborted_txns += 1

    def reconcile_txn_index(self, expected: dict[int, list[AbortedTxn]]) -> int:
        """Recovery of the .txnindex files: make them hold `expected` (segment base -> the
        aborted transactions whose markers it holds, as the log's control batches say);
        returns how many files were rewritten or removed. Raises StorageError."""
        with storage_errors(self.directory, "rebuild the .txnindex files of"):
            changed = txn_index.reconcile(self.directory,
                                          [s.base_offset for s in self.segments], expected)
        self.aborted_txns = sum(len(v) for v in expected.values())
        return changed

    def read_batch(self, where: BatchPosition, size: int) -> bytes:
        """The bytes of one batch that iter_batch_headers found (a control batch's marker)."""
        for segment in self.segments:
            if segment.base_offset == where.segment_base_offset:
                with storage_errors(segment.path, "read"):
                    return segment.read_bytes(where.position, size)
        raise StorageError(f"no segment {where.segment_base_offset}", path=self.directory,
                           errno=None, operation="read a batch of")

    @property
    def recovery_point(self) -> int:
        """Offsets below this are on disk (fdatasync'd). Any thread may read it."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return self.segments.size_bytes()

    @property
    def segment_count(self) -> int:
        return len(self.segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def snapshot(self) -> LogSnapshot:
        """The numbers to publish after every append, roll, retention or truncation (the shm
        region's partition entry): what a ``PartitionReader`` (non_owner_reader.py) in another
        process needs, and what a restarted owner attaches to."""
        active = self.segments.active
        return LogSnapshot(self._log_start_offset, self._high_watermark, self._log_end_offset,
                           active.base_offset, active.size)

    def active_index_entries(self, first: int = 0) -> list[tuple[int, int]]:
        """``(offset, position)`` of the active segment's offset index entries from the
        ``first``-th on (entry n names the last offset of the batch at byte ``position``), for
        the shm ring. The count restarts at 0 when the active segment changes and drops when a
        truncation removes entries: publish the whole list again then."""
        index = self.segments.active.index
        return [index.entry_at(n) for n in range(first, index.entries)]

    @property
    def active_index_count(self) -> int:
        """How many offset index entries the active segment has (see active_index_entries)."""
        return self.segments.active.index.entries

    # -- appending --------------------------------------------------------------------------

    def reconfigure(self, config: LogConfig) -> None:
        """Take new settings (AlterConfigs, a broker default changed): appends, rolls,
        retention and the cleaner read them from now on; sealed segments stay as they are."""
        self.config = config
        self.flushes_on_policy = config.flush_messages < LONG_MAX or config.flush_ms < LONG_MAX

    def append(self, records, *, now_ms: int, leader_epoch: int | None = None,
               assign_offsets: bool = True) -> AppendInfo:
        """Append record batches (v2, back to back): the one write path of the log. Every
        batch is checked first (CRC, lengths, size limits); the first bad one rejects the
        whole append and nothing is written.

        ``assign_offsets=True``, a leader's append of a Produce request's records field: the
        batches get the next offsets (``baseOffset`` patched), LogAppendTime stamped when the
        topic says so, ``leader_epoch`` (if given) as their partitionLeaderEpoch; the high
        watermark follows the log end unless :attr:`hold_high_watermark`.

        ``assign_offsets=False``, a follower's append: the leader's batches as they are,
        offsets, timestamps and leader epochs kept. Each must continue the log exactly (its
        base offset is at or past the log end, then each batch follows the previous one,
        skipping the offsets the leader's cleaner removed), otherwise CorruptRecordError and
        nothing is written. A batch opening a newer leader epoch adds
        it to the leader-epoch cache first. The high watermark is not moved: the leader's fetch
        responses move it (:meth:`set_high_watermark`). ``leader_epoch`` must be None
        (ValueError).

        Raises CorruptRecordError, RecordTooLargeError; StorageError when the disk fails (the
        log stays as it was, see the module docstring); LogClosedError after close."""
        if self._closed:
            raise LogClosedError(self.directory)
        view = memoryview(records)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        config = self.config
        spans, record_count, offset_count = validate_append(
            view, path=self.directory, segment_bytes=config.segment_bytes,
            max_message_bytes=config.max_message_bytes, produced=assign_offsets)
        first = self._log_end_offset
        bases = None  # each batch's base offset when they skip offsets (a compacted leader's)
        if assign_offsets:
            append_time = now_ms if config.log_append_time else None
        else:
            if leader_epoch is not None:
                raise ValueError(f"{self.directory}: a follower's append keeps the leader's "
                                 f"epochs; leader_epoch must be None, not {leader_epoch}")
            bases = self._check_continues(view, spans, first)
            append_time = None
        segment = self.segments.active
        if policy.roll_reason(
            size_bytes=segment.size, append_bytes=len(view), now_ms=now_ms,
            rolling_base_ms=segment.rolling_base_ms, index_full=segment.index_full,
            relative_last_offset=(first + offset_count if bases is None else
                                  bases[-1] + spans[-1][2] + 1) - 1 - segment.base_offset,
            segment_bytes=config.segment_bytes, segment_ms=config.segment_ms,
        ):
            segment = self._roll(now_ms)
        try:
            segment.append(view, spans, first, append_time_ms=append_time,
                           leader_epoch=leader_epoch, base_offsets=bases)
        except OSError as exc:
            with contextlib.suppress(OSError):  # best effort: recovery would cut them anyway
                segment.discard_tail(segment.size, segment.size + len(view))
            raise StorageError.from_os_error(exc, path=segment.path, operation="append to") from exc
        self._log_end_offset = segment.next_offset
        if assign_offsets and not self.hold_high_watermark:
            self._high_watermark = self._log_end_offset
        self._unflushed_messages += record_count
        if self.flushes_on_policy:
            self.flush_if_due(now_ms=now_ms)
        return AppendInfo(first, self._log_end_offset - 1,
                          -1 if append_time is None else append_time,
                          record_count, len(spans), self._log_start_offset)

    def _check_continues(self, view: memoryview, spans: list, first: int) -> list[int] | None:
        """A follower's batches must continue the log from ``first``, batch after batch, with
        growing offsets (Kafka's rule: a compacted leader skips offsets; CorruptRecordError
        naming the batch otherwise); returns their base offsets when they skip any (None:
        contiguous from ``first``). A batch opening a newer leader epoch
        is assigned in the leader-epoch cache (StorageError if its checkpoint cannot be
        written). Per batch: one header read."""
        expected = first
        bases, gaps = [], False
        for rel, _, delta, _ in spans:
            header = rb.read_header(view[rel:])
            if header.base_offset < expected:
                raise CorruptRecordError(
                    f"replicated batch at offset {header.base_offset} does not continue the "
                    f"log, which ends at {expected}", path=self.directory, position=rel)
            gaps = gaps or header.base_offset != expected
            bases.append(header.base_offset)
            if header.partition_leader_epoch > self.leader_epochs.latest_epoch:
                with storage_errors(self.directory, "write the leader-epoch checkpoint in"):
                    self.leader_epochs.assign(header.partition_leader_epoch,
                                              header.base_offset)
            expected = header.base_offset + delta + 1
        return bases if gaps else None

    # -- replication: leader epochs and the high watermark ------------------------------------

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The partition's leader-epoch cache (``leader_epochs.py``), loaded on first use (a
        log that is never replicated never reads or writes it), rebuilt from the batch headers
        when its file is missing, and cut to the log end (a crash may have lost a tail)."""
        if self._epochs is None:
            with storage_errors(self.directory, "read the leader-epoch checkpoint in"):
                cache = LeaderEpochCache.load(self.directory,
                                              (h for _, h in self.iter_batch_headers()))
                cache.truncate_from_end(self._log_end_offset)
            self._epochs = cache
        return self._epochs

    def start_leader_epoch(self, epoch: int) -> None:
        """This replica leads from now on in ``epoch``: its batches from the log end on carry
        it (pass it to :meth:`append`). Raises StorageError."""
        with storage_errors(self.directory, "write the leader-epoch checkpoint in"):
            self.leader_epochs.assign(epoch, self._log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch's answer: ``(epoch, end offset)``, see leader_epochs.py."""
        return self.leader_epochs.end_offset_for(epoch, self._log_end_offset)

    def set_high_watermark(self, offset: int) -> bool:
        """Move the high watermark (never past the log end, never back); True if it moved."""
        offset = min(offset, self._log_end_offset)
        if offset <= self._high_watermark:
            return False
        self._high_watermark = offset
        return True

    def reset_high_watermark(self, offset: int) -> None:
        """A follower's high watermark is its leader's: set it, back too (within the log)."""
        self._high_watermark = max(self._log_start_offset, min(offset, self._log_end_offset))

    def read_replica(self, offset: int, max_bytes: int) -> ReadSlice:
        """A follower's read: as :meth:`read`, but up to the log end, past the high
        watermark (the follower has to copy what is not committed yet)."""
        return log_reads.read(self, offset, max_bytes, end_offset=self._log_end_offset)

    def roll(self, *, now_ms: int) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty).
        Raises StorageError (ENOSPC: the old segment stays active)."""
        self._roll(now_ms)

    def _roll(self, now_ms: int) -> LogSegment:
        old = self.segments.active
        if old.size == 0:
            return old
        new = LogSegment.create(self.directory, self._log_end_offset, self.config, now_ms=now_ms)
        try:
            fsync_directory(self.directory)
        except OSError as exc:
            new.close()
            new.remove_files()
            raise StorageError.from_os_error(exc, path=self.directory, operation="fsync") from exc
        faults.point("log.roll.before_seal")
        try:
            old.seal()
        except OSError as exc:  # the file stays untrimmed; recovery trims it
            log.warning("could not trim %s on roll: %s", old.path, exc)
        self.segments.add(new)
        faults.point("log.after_roll")
        return new

    # -- durability -------------------------------------------------------------------------

    def flush(self, *, now_ms: int | None = None) -> None:
        """Make everything appended so far durable (fdatasync). Raises StorageError."""
        self.flush_through(self._log_end_offset - 1)
        self._unflushed_messages = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def flush_if_due(self, *, now_ms: int) -> bool:
        """Flush when ``flush.messages`` or ``flush.ms`` says so (also call it from a timer)."""
        if policy.flush_due(unflushed_messages=self._unflushed_messages, now_ms=now_ms,
                            last_flush_ms=self._last_flush_ms,
                            flush_messages=self.config.flush_messages,
                            flush_ms=self.config.flush_ms):
            self.flush(now_ms=now_ms)
            return True
        return False

    def flush_through(self, offset: int) -> int:
        """Make offsets <= ``offset`` durable; return the new recovery point. Thread-safe (the
        group commit thread calls it). Raises StorageError, LogClosedError."""
        if offset < self._recovery_point:
            return self._recovery_point
        with self.segments.lock:
            if self._closed:
                raise LogClosedError(self.directory)
            end = self._log_end_offset
            if end > self._recovery_point:
                for segment in self.segments.unflushed(self._recovery_point):
                    with storage_errors(segment.path, "fdatasync"):
                        faults.point("log.flush.before_sync")
                        segment.flush()
                self._recovery_point = end
            return self._recovery_point

    def unsynced_end(self) -> tuple[int, int] | None:
        """Before a sync of this log's whole filesystem (group_commit.py): what it will make
        durable, to hand to :meth:`synced_through` after it; None when everything is durable
        already. Thread-safe. The bytes below the log end read here are written (an append
        moves the end after its write), so a sync that begins after this call covers them."""
        cuts = self._end_cuts  # before the end: a cut between the two reads is seen as one
        end = self._log_end_offset
        if end <= self._recovery_point:
            return None
        return end, cuts

    @functools.cached_property
    def device(self) -> int:
        """The filesystem the log lies on (st_dev): logs on one are synced together."""
        return os.stat(self.directory).st_dev

    def synced_through(self, unsynced: tuple[int, int]) -> int | None:
        """After a sync of the whole filesystem that began after :meth:`unsynced_end` gave
        `unsynced`: the new recovery point. None when the log end was cut meanwhile (a
        follower's truncation): bytes below that end may have been written again after the
        sync began, and the caller syncs this log itself (:meth:`flush_through`).
        Thread-safe. Raises LogClosedError."""
        end, cuts = unsynced
        with self.segments.lock:
            if self._closed:
                raise LogClosedError(self.directory)
            if self._end_cuts != cuts:
                return None
            self._recovery_point = max(self._recovery_point, end)
            return self._recovery_point

    # -- reading (log_reads.py) -------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, committed: bool = False) -> ReadSlice:
        """Whole batches from the one holding ``offset``, in one segment, up to ``max_bytes``
        but at least one batch (KIP-74), never past the high watermark (the last stable
        offset when ``committed``). Empty (falsy) there. O(log n) in the segment's index
        plus a short scan of headers.
        Raises OffsetOutOfRangeError outside [log start, log end], LogClosedError."""
        if committed:
            return log_reads.read(self, offset, max_bytes, end_offset=self.last_stable_offset)
        return log_reads.read(self, offset, max_bytes)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms`` below the
        high watermark, or None (Kafka's ListOffsets by time). O(segments) comparisons in
        memory, then O(log n) in one segment's time and offset indexes; record-exact when
        ``klog.protocol.records`` can decode the batch (see ``lookup.refine_in_batch``)."""
        return log_reads.offset_for_timestamp(self, timestamp_ms)

    def offset_of_max_timestamp(self, end_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp below
        ``end_offset`` (the high watermark, or the last stable offset), or None when there is
        none (KIP-734's ListOffsets MAX_TIMESTAMP). Reads the headers of the one segment whose
        max timestamp is largest, all segments' only when that record is past ``end_offset``."""
        return log_reads.offset_of_max_timestamp(self, end_offset)

    def iter_batch_headers(
        self, start_offset: int | None = None
    ) -> Iterator[tuple[BatchPosition, rb.BatchHeader]]:
        """Every batch header from the batch holding ``start_offset`` (default: the log start)
        to the log end, read from disk (e.g. to rebuild idempotent-producer state). Do not
        append while iterating."""
        start = self._log_start_offset if start_offset is None else start_offset
        return log_reads.iter_batch_headers(self, start)

    # -- retention, truncation (retention.py) -------------------------------------------------

    def apply_retention(self, *, now_ms: int) -> int:
        """Delete the segments retention.ms / retention.bytes expire (rolling an expired active
        segment first), advance and persist the log start offset, and close ``.deleted``
        files whose delay has passed. Returns the number of segments deleted; the decision is
        kept in :attr:`last_retention`. Raises StorageError."""
        return retention.apply_retention(self, now_ms)

    def delete_records_before(self, offset: int, *, now_ms: int) -> int:
        """Kafka's DeleteRecords: move the log start up to ``offset`` (never past the high
        watermark), persist it, and delete the segments wholly below it (with retention's
        other rules). For logs compacted by snapshot, such as ``__consumer_offsets``.
        Returns the number of segments deleted. Raises StorageError."""
        offset = min(offset, self.high_watermark)
        if offset > self._log_start_offset:
            self.set_log_start_offset(offset)
        return retention.apply_retention(self, now_ms)

    def follow_log_start(self, leader_log_start: int, *, now_ms: int) -> int:
        """A follower's side of its leader's log start (Kafka's maybeIncrementLogStartOffset
        on a follower): the leader moved its own (retention, a snapshot's DeleteRecords), so
        the follower moves its log start there too, or its copy would grow forever; never
        past its own high watermark, which bounds what it knows the partition committed.
        Returns the number of segments deleted; writes nothing when the start stays.
        Raises StorageError."""
        target = min(leader_log_start, self._high_watermark)
        if target <= self._log_start_offset:
            return 0
        return self.delete_records_before(target, now_ms=now_ms)

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """A follower whose log ends below its leader's log start (it was away while the
        leader deleted what it would need next): nothing it holds can be continued, so the
        log restarts empty at ``offset`` (Kafka's truncateFullyAndStartAt), with no leader
        epoch known and its high watermark there. Raises StorageError."""
        if offset < self._log_end_offset:
            raise ValueError(f"{self.directory}: restarting at {offset} would drop records "
                             f"below the log end {self._log_end_offset}: truncate instead")
        self._abort_cleaning()
        with storage_errors(self.directory, "restart the log in"):
            retention.restart_at(self, offset, now_ms)
            self.leader_epochs.clear()
        self._high_watermark = offset

    def truncate_to(self, offset: int, *, now_ms: int) -> int:
        """Remove offsets >= ``offset`` (whole batches: the log end may land below ``offset``;
        for replication). Below every segment, empty the log and restart it at ``offset``.
        Returns the new log end offset. Raises StorageError."""
        if offset < self._log_end_offset:
            self._abort_cleaning()
        end = retention.truncate_to(self, offset, now_ms)
        if self._epochs is not None:
            with storage_errors(self.directory, "write the leader-epoch checkpoint in"):
                self._epochs.truncate_from_end(end)
        return end

    def _abort_cleaning(self) -> None:
        """A truncation makes a cleaning in progress wrong: count it (the job will not promote
        its files) and remove the swaps already decided, which recovery would install."""
        with self.cleaning_lock:
            self.truncations += 1
            with storage_errors(self.directory, "remove cleaned segments of"):
                cleaning_swap.discard_all(self.directory)

    def set_end_offsets(self, end: int) -> None:
        """After a truncation (retention.py): the log end, and what may not exceed it. The
        end moves first and the count of cuts after it (`unsynced_end` reads them in the
        other order)."""
        self._log_end_offset = end
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self._end_cuts += 1

    def set_log_start_offset(self, offset: int) -> None:
        """Retention and DeleteRecords (retention.py) move the log start; it is persisted,
        and the leader-epoch cache, if loaded, starts there too (as Kafka's)."""
        self._log_start_offset = offset
        self._write_state(clean_shutdown=False)
        if self._epochs is not None:
            with storage_errors(self.directory, "write the leader-epoch checkpoint in"):
                self._epochs.truncate_from_start(offset)

    def _write_state(self, *, clean_shutdown: bool) -> None:
        with storage_errors(self.directory, "write partition.state in"):
            write_state(self.directory, log_start_offset=self._log_start_offset,
                        clean_shutdown=clean_shutdown)

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Seal the active segment, flush everything, record a clean shutdown, release the
        files. ReadSlices handed out become invalid. Idempotent. Raises StorageError (the
        files are released anyway; the next open then recovers as after a crash)."""
        if self._closed:
            return
        try:
            with storage_errors(self.directory, "close the log"), self.segments.lock:
                self.segments.active.seal()
                for segment in self.segments:
                    segment.sync_all()
            self._write_state(clean_shutdown=True)
        finally:
            self._closed = True
            self.segments.close_all()

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion). Raises StorageError."""
        self._closed = True
        self.segments.close_all()
        with storage_errors(self.directory, "delete"):
            shutil.rmtree(self.directory)

    def __repr__(self) -> str:
        return (f"<PartitionLog {self.directory} [{self._log_start_offset}, "
                f"{self._log_end_offset}) hw {self._high_watermark} {self.segment_count} segments>")


def _state_already_says(report, log_start_offset: int, first_base: int) -> bool:
    """Whether partition.state on disk already records this log start and an unclean
    shutdown, as the open would write it. A new partition has no file, which reads just so:
    skipping the write spares it two fsyncs, which on a worker opening thousands of
    partitions at once (a topic of many, a restart) were most of its time on the loop."""
    saved = report.state_on_disk
    if saved is None or saved[1]:
        return False
    return (first_base if saved[0] is None else saved[0]) == log_start_offset
