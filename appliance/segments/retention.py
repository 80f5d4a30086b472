"""Removing data from a PartitionLog: retention (whole old segments) and truncation (the newest
offsets, for replication).

These functions are :class:`~appliance.segments.log.PartitionLog` methods kept in a module of
their own; they change its state. The decisions are the pure functions of ``policy.py``; here
they are applied: roll an expired active segment first, unlist and rename the doomed segments
to ``*.deleted`` (closed after ``file.delete.delay.ms``, so ReadSlices in flight stay valid),
move and persist the log start offset. Writer thread only (see ``log.py``).

What can fail: StorageError. A full disk while rolling leaves everything as it was; a crash
between renaming and writing ``partition.state`` is repaired on open (``.deleted`` files are
removed, the log start becomes the first remaining segment's base offset).
"""

from __future__ import annotations

from . import faults, policy
from .errors import LogClosedError, storage_errors
from .segment import LogSegment
from .segment_repair import truncate_segment


def apply_retention(plog, now_ms: int) -> int:
    """See :meth:`PartitionLog.apply_retention`."""
    segments, config = plog.segments, plog.config
    segments.close_due(now_ms)
    plan = policy.retention_plan(
        [policy.SegmentStats(s.base_offset, s.next_offset, s.size, s.largest_timestamp_ms())
         for s in segments],
        now_ms=now_ms,
        # cleanup.policy without "delete" (compact alone): only the log start deletes
        retention_ms=config.retention_ms if config.delete else -1,
        retention_bytes=config.retention_bytes if config.delete else -1,
        log_start_offset=plog.log_start_offset, high_watermark=plog.high_watermark,
    )
    if plan.delete_count:
        if plan.roll_active:
            plog.roll(now_ms=now_ms)
        segments.retire(list(segments[: plan.delete_count]), now_ms + config.file_delete_delay_ms)
        faults.point("log.retention.after_rename")
    if plan.log_start_offset != plog.log_start_offset:
        plog.set_log_start_offset(plan.log_start_offset)
    plog.last_retention = plan
    return plan.delete_count


def truncate_to(plog, offset: int, now_ms: int) -> int:
    """See :meth:`PartitionLog.truncate_to`."""
    if plog.closed:
        raise LogClosedError(plog.directory)
    segments = plog.segments
    if offset >= plog.log_end_offset:
        return plog.log_end_offset
    if offset < segments.first.base_offset:
        return _truncate_fully(plog, offset, now_ms)
    i = segments.index_of(offset)
    keep = segments[i]
    if keep is not segments.active:
        segments.retire(list(segments[i + 1 :]), now_ms + plog.config.file_delete_delay_ms)
        with storage_errors(keep.path, "reactivate"):
            keep.activate()
    with storage_errors(keep.path, "truncate"):
        truncate_segment(keep, offset)
        keep.flush()
    plog.set_end_offsets(keep.next_offset)
    if plog.log_start_offset > plog.log_end_offset:  # truncated below the log start
        plog.set_log_start_offset(plog.log_end_offset)
    return plog.log_end_offset


def restart_at(plog, offset: int, now_ms: int) -> int:
    """See :meth:`PartitionLog.truncate_fully_and_start_at` (the epochs are its own)."""
    if plog.closed:
        raise LogClosedError(plog.directory)
    return _truncate_fully(plog, offset, now_ms)


def _truncate_fully(plog, offset: int, now_ms: int) -> int:
    """Below every segment: an empty log restarting at ``offset`` (Kafka's
    truncateFullyAndStartAt). The new segment is created first, so a full disk leaves the log
    as it was."""
    new = LogSegment.create(plog.directory, offset, plog.config, now_ms=now_ms)
    plog.segments.retire(list(plog.segments), now_ms + plog.config.file_delete_delay_ms)
    plog.segments.add(new)
    plog.set_end_offsets(offset)
    plog.set_log_start_offset(offset)
    return offset
