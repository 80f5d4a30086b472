"""Cleaning one compacted log (Kafka's ``Cleaner.clean``), in three steps for three threads.

1. :func:`prepare`, on the log's writer thread: decide whether and what to clean
   (``cleaning_plan.py``), and open the sealed segments to read with descriptors of the job's
   own (retention may close the log's meanwhile).
2. :func:`run`, on any thread (the worker's cleaner thread): build the offset map over the
   dirty section, then rewrite every cleanable segment from the log start, group by group,
   into ``.cleaned`` files, fsynced and promoted to ``.swap`` (``cleaning_swap.py``). It
   touches nothing the log owns: only the job's descriptors and new files. CPU-bound; the
   ``throttle`` callback it is given (``log.cleaner.io.max.bytes.per.second``) may sleep.
3. :func:`install`, on the writer thread: swap each cleaned segment in, if the segments it
   replaces are still those that were read (a truncation or retention meanwhile discards it).

Every record that survives keeps its offset, and every batch its producer id, epoch,
sequence, timestamps and leader epoch (``batch_filter.py``). The active segment and
everything from the first unstable offset on are never read.

A truncation of the log while a job runs (a follower's) would make its cleaned segments
wrong: ``PartitionLog.truncate_to`` counts truncations and removes any ``.swap`` under the
log's ``cleaning_lock``, and the job promotes its ``.cleaned`` files under the same lock only
if no truncation happened since :func:`prepare`; otherwise it stops with CleaningAborted, as
it does when ``job.cancelled`` is set (the worker stopping).

What can fail: CorruptRecordError (a batch that fails its CRC or does not parse: the job
stops, nothing is swapped in, the log is as it was), CleaningAborted, StorageError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from klog.protocol import record_batch as rb

from . import cleaning_plan, cleaning_swap, faults, txn_index
from .batch_filter import Retention, filter_batch, is_commit
from .config import LogConfig
from .errors import CorruptRecordError, storage_errors
from .key_passes import map_batch
from .layout import TXN_INDEX_SUFFIX, segment_path
from .offset_map import OffsetMap
from .segment import LogSegment
from .segment_repair import recover_segment
from .txn_cleaning import CleanedTransactions
from .txn_index import AbortedTxn

MIB = 1024 * 1024
YIELD_EVERY_S = 0.001  # the cleaner's thread lets the event loop run at least this often


class CleaningAborted(Exception):  # noqa: N818 - Kafka's name: LogCleaningAbortedException
    """The job stopped on purpose: the log was truncated meanwhile, or the worker stops."""


@dataclass(frozen=True)
class CleanerSettings:
    dedupe_buffer_bytes: int = 128 * MIB  # log.cleaner.dedupe.buffer.size
    io_buffer_bytes: int = 512 * 1024  # log.cleaner.io.buffer.size: reads and writes
    throttle: Callable[[int], None] | None = None  # told of every byte read or written


class Source(NamedTuple):
    """A sealed segment as the job reads it."""

    base_offset: int
    next_offset: int  # the next segment's base
    size: int
    path: str
    fd: int  # the job's own O_RDONLY descriptor
    index_entries: int


@dataclass
class CleaningJob:
    directory: str
    config: LogConfig
    range: cleaning_plan.Cleanable
    sources: list[Source]  # every cleanable segment, from the log start
    aborted: list[AbortedTxn]
    last_batch_of_producer: dict[int, int]
    now_ms: int
    owner: object = None  # the PartitionLog: its cleaning_lock and truncations
    truncations: int = 0  # the owner's count when the job was prepared
    cancelled: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise CleaningAborted when the job was cancelled."""
        if self.cancelled.is_set():
            raise CleaningAborted(f"{self.directory}: cleaning cancelled")


class PreparedSwap(NamedTuple):
    base_offset: int
    replaced: tuple[tuple[int, int], ...]  # (base offset, size) of the segments it replaces
    size: int


@dataclass
class CleaningResult:
    directory: str
    swaps: list[PreparedSwap] = field(default_factory=list)
    cleaned_through: int = -1  # the next run's first dirty offset (-1: unchanged)
    bytes_read: int = 0
    bytes_written: int = 0


def segment_stats(plog) -> list[cleaning_plan.SegmentStats]:
    """The plan's view of a log's segments (writer thread)."""
    segments = list(plog.segments)
    stats = []
    for i, s in enumerate(segments):
        next_offset = segments[i + 1].base_offset if i + 1 < len(segments) else s.next_offset
        stats.append(cleaning_plan.SegmentStats(s.base_offset, next_offset, s.size,
                                                s.largest_timestamp_ms(), s.index.entries))
    return stats


def cleanable_range(plog, checkpoint: int | None, now_ms: int) -> cleaning_plan.Cleanable:
    """What a run would clean now, and its dirty ratio (the metrics publish it)."""
    first_dirty = cleaning_plan.first_dirty_offset(checkpoint, plog.log_start_offset,
                                                   plog.log_end_offset)
    return cleaning_plan.cleanable(
        segment_stats(plog), first_dirty=first_dirty,
        first_unstable=plog.first_unstable_offset, now_ms=now_ms,
        min_compaction_lag_ms=plog.config.min_compaction_lag_ms)


def prepare(plog, *, checkpoint: int | None, now_ms: int,
            last_batch_of_producer: dict[int, int] | None = None,
            force: bool = False) -> CleaningJob | None:
    """The job for this log now, or None when it is not dirty enough (``force``: any dirt).
    Writer thread. Raises StorageError."""
    stats = segment_stats(plog)
    range_ = cleanable_range(plog, checkpoint, now_ms)
    config = plog.config
    if range_.dirty_bytes == 0 or not (force or cleaning_plan.needs_cleaning(
            range_, stats, now_ms=now_ms,
            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
            max_compaction_lag_ms=config.max_compaction_lag_ms)):
        return None
    sources = []
    try:
        for s, segment in zip(stats, list(plog.segments), strict=True):
            if s.next_offset > range_.end_offset or segment.active:
                break
            with storage_errors(segment.path, "open for cleaning"):
                fd = os.open(segment.path, os.O_RDONLY)
            sources.append(Source(s.base_offset, s.next_offset, s.size, segment.path, fd,
                                  s.index_entries))
        aborted = (plog.aborted_transactions(plog.log_start_offset, range_.end_offset)
                   if plog.aborted_txns else [])
    except BaseException:
        _close(sources)
        raise
    return CleaningJob(plog.directory, config, range_, sources, aborted,
                       dict(last_batch_of_producer or {}), now_ms, owner=plog,
                       truncations=plog.truncations)


def run(job: CleaningJob, settings: CleanerSettings) -> CleaningResult:
    """Map, then rewrite into ``.swap`` files (any thread; see the module docstring).
    Raises CorruptRecordError, CleaningAborted, StorageError; the job's descriptors are
    closed either way and no ``.cleaned`` or ``.swap`` file is left behind by a failure."""
    result = CleaningResult(job.directory)
    offset_map = None
    try:
        # an OSError here is the offset table's memory (mmap); reads raise StorageError
        with storage_errors(job.directory, "map the dirty section (offset map memory)"):
            # no more keys than offsets in the dirty section: a small one gets a small map
            offset_map = OffsetMap(settings.dedupe_buffer_bytes, expected_keys=(
                job.range.end_offset - job.range.first_dirty_offset))
            mapped_through = _build_map(job, offset_map, settings, result)
        if mapped_through <= job.range.first_dirty_offset:
            return result
        offset_map.latest_offset = mapped_through - 1
        rules = Retention(offset_map, job.now_ms - job.config.delete_retention_ms,
                          CleanedTransactions(job.aborted), job.last_batch_of_producer)
        to_clean = [s for s in job.sources if s.base_offset < mapped_through]
        groups = cleaning_plan.group_by_size(
            [cleaning_plan.SegmentStats(s.base_offset, s.next_offset, s.size, 0,
                                        s.index_entries) for s in to_clean],
            max_bytes=job.config.segment_bytes,
            max_index_entries=job.config.segment_index_bytes // 12)
        by_base = {s.base_offset: s for s in to_clean}
        for group in groups:
            sources = [by_base[g.base_offset] for g in group]
            result.swaps.append(_clean_group(job, sources, rules, settings, result))
        result.cleaned_through = mapped_through
        return result
    except BaseException:
        for swap in result.swaps:
            cleaning_swap.discard(job.directory, swap.base_offset)
        result.swaps = []
        raise
    finally:
        if offset_map is not None:
            offset_map.close()
        _close(job.sources)


def install(plog, result: CleaningResult, *, now_ms: int) -> int:
    """Swap the cleaned segments in (writer thread). A swap whose segments changed since
    they were read (truncated, deleted by retention, the log closed) is discarded with the
    ones after it. Returns how many segments were swapped in. Raises StorageError."""
    installed = 0
    for n, swap in enumerate(result.swaps):
        group = None if plog.closed else _group_of(plog, swap)
        if group is None:
            for rest in result.swaps[n:]:
                cleaning_swap.discard(result.directory, rest.base_offset)
            break
        _swap_in(plog, group, swap, now_ms)
        installed += 1
    return installed


def clean(plog, *, checkpoint: int | None, now_ms: int,
          settings: CleanerSettings = CleanerSettings(), force: bool = False,
          last_batch_of_producer: dict[int, int] | None = None) -> CleaningResult | None:
    """The three steps on the calling thread (tests, tools). None: nothing to clean."""
    job = prepare(plog, checkpoint=checkpoint, now_ms=now_ms, force=force,
                  last_batch_of_producer=last_batch_of_producer)
    if job is None:
        return None
    result = run(job, settings)
    install(plog, result, now_ms=now_ms)
    return result


# -- the map ---------------------------------------------------------------------------------


def _build_map(job: CleaningJob, offset_map: OffsetMap, settings: CleanerSettings,
               result: CleaningResult) -> int:
    """Map the dirty section; returns the offset it was mapped through (exclusive): the end
    of the range, or the batch where the map filled up."""
    first_dirty = job.range.first_dirty_offset
    txns = CleanedTransactions(job.aborted)
    mapped_through = first_dirty
    for source in job.sources:
        if source.next_offset <= first_dirty:
            continue
        job.check()
        for buf, pos, header in _batches(source, settings, result):
            if header.is_control:
                txns.on_marker(header.last_offset, header.producer_id,
                               is_commit(buf, pos, header))
                continue
            if txns.on_batch(header.last_offset, header.producer_id, header.is_transactional):
                continue
            if not offset_map.room_for(header.records_count):
                return max(header.base_offset, first_dirty)
            map_batch(buf, pos, header, offset_map, first_dirty)
        mapped_through = source.next_offset
    return mapped_through


# -- rewriting -------------------------------------------------------------------------------


def _clean_group(job: CleaningJob, sources: list[Source], rules: Retention,
                 settings: CleanerSettings, result: CleaningResult) -> PreparedSwap:
    base = sources[0].base_offset
    end = sources[-1].next_offset
    # preallocated to what the group holds (it can only shrink), not to segment.bytes
    sized = dataclasses.replace(job.config, segment_bytes=max(sum(s.size for s in sources),
                                                              4096))
    cleaned = LogSegment.create(job.directory, base, sized, now_ms=job.now_ms,
                                name_suffix=cleaning_swap.CLEANED)
    try:
        with storage_errors(cleaned.path, "write"):
            out, batches = bytearray(), []
            for source in sources:
                job.check()
                for buf, pos, header in _batches(source, settings, result):
                    kept = filter_batch(buf, pos, header, rules)
                    if kept is None:
                        continue
                    batches.append((len(out), rb.read_header(kept)))
                    out += kept
                    if len(out) >= settings.io_buffer_bytes:
                        _write(cleaned, out, batches, settings, result)
                        out, batches = bytearray(), []
            _write(cleaned, out, batches, settings, result)
            cleaned.seal()
            cleaned.sync_all()
            aborts = [a for a in rules.transactions.retained_aborts
                      if base <= a.last_offset < end]
            if aborts:
                _write_txn_index(job.directory, base, aborts)
    except BaseException:
        cleaned.close()
        cleaning_swap.discard(job.directory, base)
        raise
    cleaned.close()
    faults.point("cleaner.after_cleaned")
    _promote(job, base)
    faults.point("cleaner.after_promote")
    return PreparedSwap(base, tuple((s.base_offset, s.size) for s in sources), cleaned.size)


def _promote(job: CleaningJob, base: int) -> None:
    """``.cleaned`` -> ``.swap``, unless the log was truncated or the job cancelled since it
    was prepared (then the files go and CleaningAborted says why)."""
    owner = job.owner
    lock = owner.cleaning_lock if owner is not None else contextlib.nullcontext()
    with lock:
        if job.cancelled.is_set() or (owner is not None
                                      and owner.truncations != job.truncations):
            cleaning_swap.discard(job.directory, base)
            raise CleaningAborted(f"{job.directory}: truncated or stopped while cleaning")
        with storage_errors(job.directory, "promote a cleaned segment in"):
            cleaning_swap.promote_cleaned(job.directory, base)


def _write(cleaned: LogSegment, out: bytearray, batches: list, settings: CleanerSettings,
           result: CleaningResult) -> None:
    if not out:
        return
    cleaned.append_cleaned(out, batches)
    result.bytes_written += len(out)
    if settings.throttle is not None:
        settings.throttle(len(out))


def _write_txn_index(directory: str, base: int, aborts: list[AbortedTxn]) -> None:
    path = segment_path(directory, base, TXN_INDEX_SUFFIX) + cleaning_swap.CLEANED
    with open(path, "wb") as file:
        file.write(b"".join(txn_index.ENTRY.pack(txn_index.VERSION, *a) for a in aborts))
        file.flush()
        os.fsync(file.fileno())


def _batches(source: Source, settings: CleanerSettings, result: CleaningResult):
    """(buffer, position, header) of each batch of a source segment, CRC checked, read in
    chunks of the io buffer size. Raises CorruptRecordError naming the file and position."""
    chunk = max(settings.io_buffer_bytes, rb.HEADER_BYTES)
    pos, buf, buf_start = 0, b"", 0
    yielded_at = time.monotonic()
    while pos < source.size:
        off = pos - buf_start
        if off + rb.LOG_OVERHEAD > len(buf):
            buf, buf_start, off = _read(source, pos, chunk, settings, result), pos, 0
        (length,) = rb.BATCH_LENGTH.unpack_from(buf, off + 8) if off + 12 <= len(buf) else (-1,)
        total = length + rb.LOG_OVERHEAD
        if length < rb.MIN_BATCH_LENGTH or pos + total > source.size:
            raise CorruptRecordError(f"implausible batch length {length} at byte {pos}",
                                     path=source.path, position=pos)
        if off + total > len(buf):
            buf, buf_start, off = (_read(source, pos, max(chunk, total), settings, result),
                                   pos, 0)
        try:
            header = rb.check_batch(buf, off, total)
        except rb.CorruptBatchError as exc:
            raise CorruptRecordError(str(exc), path=source.path, position=pos) from exc
        if faults.ARMED:
            faults.point("cleaner.batch")
        now = time.monotonic()
        if now >= yielded_at + YIELD_EVERY_S:  # hand the GIL to the event loop now rather
            time.sleep(0)  # than at the interpreter's switch interval (5 ms)
            yielded_at = now
        yield buf, off, header
        pos += total


def _read(source: Source, pos: int, length: int, settings: CleanerSettings,
          result: CleaningResult) -> bytes:
    with storage_errors(source.path, "read for cleaning"):
        data = os.pread(source.fd, min(length, source.size - pos), pos)
    result.bytes_read += len(data)
    if settings.throttle is not None:
        settings.throttle(len(data))
    return data


def _close(sources: list[Source]) -> None:
    for source in sources:
        with contextlib.suppress(OSError):
            os.close(source.fd)


# -- swapping in ------------------------------------------------------------------------------


def _group_of(plog, swap: PreparedSwap) -> list[LogSegment] | None:
    """The live segments a swap replaces, if they are still exactly those it read."""
    segments = list(plog.segments)
    bases = [s.base_offset for s in segments]
    if swap.base_offset not in bases:
        return None
    i = bases.index(swap.base_offset)
    group = segments[i : i + len(swap.replaced)]
    if len(group) != len(swap.replaced) or i + len(group) >= len(segments):
        return None
    if any(s.active or (s.base_offset, s.size) != r for s, r in zip(group, swap.replaced,
                                                                   strict=True)):
        return None
    return group


def _swap_in(plog, group: list[LogSegment], swap: PreparedSwap, now_ms: int) -> None:
    directory = plog.directory
    segments = list(plog.segments)
    next_base = segments[segments.index(group[-1]) + 1].base_offset
    with storage_errors(directory, "swap a cleaned segment into"):
        cleaning_swap.replace_live(directory, swap.base_offset)
        faults.point("cleaner.after_replace_live")
        cleaned = LogSegment(directory, swap.base_offset, plog.config, now_ms=now_ms)
        try:
            recover_segment(cleaned, mode="trust", active=False, next_base=next_base)
        except BaseException:
            cleaned.close()
            raise
    plog.segments.replace(group, cleaned, now_ms + plog.config.file_delete_delay_ms)
    faults.point("cleaner.after_retire")
    with storage_errors(directory, "swap a cleaned segment into"):
        cleaning_swap.drop_swap_names(directory, swap.base_offset)
