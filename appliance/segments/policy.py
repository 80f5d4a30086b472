"""The log's decisions as pure functions: when to roll, what retention deletes, when to flush.

They take plain numbers and ``now_ms`` and return a decision, so they are trivially tested and
the log that applies them stays free of policy. The rules are Kafka's (``LocalLog.roll``,
``UnifiedLog.deleteRetentionMsBreachedSegments`` / ``...SizeBreachedSegments``,
``UnifiedLog.flush``), restated here so each can be read in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

INT32_MAX = 2**31 - 1


def roll_reason(
    *,
    size_bytes: int,
    append_bytes: int,
    rolling_base_ms: int,
    now_ms: int,
    relative_last_offset: int,
    index_full: bool,
    segment_bytes: int,
    segment_ms: int,
) -> str | None:
    """Why the active segment must roll before an append of ``append_bytes``, or None.

    An empty segment never rolls: it takes any append, even one larger than segment.bytes
    (the batch has to live somewhere). ``rolling_base_ms`` is when the segment started
    (creation time, or its first batch's timestamp after a restart, as Kafka does);
    ``relative_last_offset`` is the append's last offset minus the segment's base offset,
    which must fit the index's int32.
    """
    if size_bytes == 0:
        return None
    if size_bytes + append_bytes > segment_bytes:
        return "segment.bytes"
    if now_ms - rolling_base_ms > segment_ms:
        return "segment.ms"
    if index_full:
        return "index full"
    if relative_last_offset > INT32_MAX:
        return "offset overflow"
    return None


class SegmentStats(NamedTuple):
    """What retention needs to know about one segment, oldest first."""

    base_offset: int
    next_offset: int  # base offset of what follows this segment's last batch
    size_bytes: int
    largest_timestamp_ms: int  # max batch timestamp; the file's mtime when it has none


class RetentionPlan(NamedTuple):
    delete_count: int  # delete this many segments, oldest first
    reasons: tuple[str, ...]  # e.g. ("retention.ms",) for the report
    roll_active: bool  # the active segment is among them: roll before deleting
    log_start_offset: int  # the log start offset once they are gone


def retention_plan(
    segments: Sequence[SegmentStats],
    *,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    log_start_offset: int,
    high_watermark: int,
) -> RetentionPlan:
    """Which oldest segments retention deletes: by age, then by size, then those wholly below
    the log start offset. A segment is deletable only when all of it lies below the high
    watermark, and an empty active segment is never deleted. -1 disables a bound."""
    count, reasons = 0, []

    def eligible(i: int) -> bool:
        seg, last = segments[i], i == len(segments) - 1
        if last and seg.size_bytes == 0:
            return False
        upper = seg.next_offset if last else segments[i + 1].base_offset
        return high_watermark >= upper

    if retention_ms >= 0:
        while count < len(segments) and eligible(count):
            if now_ms - segments[count].largest_timestamp_ms <= retention_ms:
                break
            count += 1
        if count:
            reasons.append("retention.ms")
    if retention_bytes >= 0:
        excess = sum(s.size_bytes for s in segments[count:]) - retention_bytes
        before = count
        while count < len(segments) and eligible(count) and excess >= segments[count].size_bytes:
            excess -= segments[count].size_bytes
            count += 1
        if count > before:
            reasons.append("retention.bytes")
    before = count
    while (
        count < len(segments) - 1
        and segments[count + 1].base_offset <= log_start_offset
        and eligible(count)
    ):
        count += 1
    if count > before:
        reasons.append("log start offset")
    if not segments:
        return RetentionPlan(0, (), False, log_start_offset)
    everything = count == len(segments)
    first_kept = segments[-1].next_offset if everything else segments[count].base_offset
    return RetentionPlan(count, tuple(reasons), everything, max(log_start_offset, first_kept))


def flush_due(
    *,
    unflushed_messages: int,
    last_flush_ms: int,
    now_ms: int,
    flush_messages: int,
    flush_ms: int,
) -> bool:
    """True when ``flush.messages`` records are unflushed, or the last flush is ``flush.ms``
    old and something is unflushed."""
    if unflushed_messages <= 0:
        return False
    return unflushed_messages >= flush_messages or now_ms - last_flush_ms >= flush_ms
