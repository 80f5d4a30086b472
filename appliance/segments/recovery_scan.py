"""Finding the valid part of a segment after a crash, and the report of what recovery did.

A segment file is valid up to the first batch that is incomplete, fails its checks (magic,
lengths, CRC-32C) or breaks offset continuity (each batch must start where the previous one
ended; the first at the segment's base offset). Everything from there on is a torn or corrupt
tail and is cut off: it was never acknowledged as durable (or it was damaged afterwards, and a
damaged batch must never be served).

The end of data in a *preallocated* file is a zeroed header: ``posix_fallocate`` fills with
zeros and a real batch header is never all zeros (magic is 2). So the scan stops silently at
61 zero bytes and reports a truncation only when non-zero bytes lie beyond the valid end.

:func:`scan_segment` works on any buffer (the active segment's mmap, or a read-only map of a
sealed file) and calls back for each good batch, so the caller rebuilds indexes in the same pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from klog.protocol.record_batch import (
    HEADER,
    HEADER_BYTES,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptBatchError,
    check_batch,
)

ZERO_HEADER = bytes(HEADER_BYTES)
_ZERO_SCAN_CHUNK = 64 * 1024


class ScanResult(NamedTuple):
    valid_end: int  # position just after the last good batch
    next_offset: int  # offset just after the last good batch
    batches: int  # good batches seen
    problem: str | None  # why the scan stopped before ``end`` (None: clean end of data)


def scan_segment(
    buf, start: int, end: int, next_offset: int, on_batch: Callable[[int, BatchHeader], None]
) -> ScanResult:
    """Validate batches in ``buf[start:end]``; ``next_offset`` is the lowest base offset the
    first batch may have. Offsets only grow, with gaps where the log cleaner removed records
    (Kafka's rule: monotonic, not contiguous). Never raises for bad data: it stops and says
    why."""
    pos, batches = start, 0
    while pos < end:
        if end - pos < HEADER_BYTES or buf[pos : pos + HEADER_BYTES] == ZERO_HEADER:
            if _all_zero(buf, pos, min(end, pos + HEADER_BYTES)):
                return ScanResult(pos, next_offset, batches, None)
            return ScanResult(pos, next_offset, batches, f"partial batch header at byte {pos}")
        try:
            header = check_batch(buf, pos, end - pos)
        except CorruptBatchError as exc:
            return ScanResult(pos, next_offset, batches, str(exc))
        if header.base_offset < next_offset:
            problem = (
                f"batch at byte {pos} has base offset {header.base_offset}, "
                f"expected at least {next_offset}"
            )
            return ScanResult(pos, next_offset, batches, problem)
        on_batch(pos, header)
        batches += 1
        pos += header.size
        next_offset = header.next_offset
    return ScanResult(pos, next_offset, batches, None)


def _all_zero(buf, start: int, end: int) -> bool:
    return not any(buf[start:end])


def garbage_end(buf, start: int, end: int) -> int:
    """End of the non-zero bytes that follow ``start`` in a preallocated file: the scan stops at
    the first all-zero 64 KiB chunk (a torn append is contiguous from the valid end)."""
    last = start
    pos = start
    while pos < end:
        chunk = buf[pos : min(end, pos + _ZERO_SCAN_CHUNK)]
        stripped = chunk.rstrip(b"\0")
        if not stripped:
            break
        last = pos + len(stripped)
        pos += len(chunk)
    return last


def count_plausible_offsets(buf, start: int, end: int) -> int:
    """Offsets held by batch headers that still look like headers after a bad one: a lower
    bound of what a truncation lost, for the report only."""
    count, pos = 0, start
    while end - pos >= HEADER_BYTES:
        header = BatchHeader._make(HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC or header.batch_length < MIN_BATCH_LENGTH:
            break
        if header.last_offset_delta >= 0:
            count += header.last_offset_delta + 1
        pos += header.size
    return count


@dataclass
class SegmentRecovery:
    """What recovery did to one segment."""

    base_offset: int
    path: str
    scanned_from: int = 0  # byte position where validation started
    batches_validated: int = 0
    bytes_truncated: int = 0
    truncated_at: int | None = None  # byte position of the cut
    truncated_from_offset: int | None = None  # first offset no longer in the log
    offsets_truncated: int = 0  # offsets lost (a lower bound when the tail was garbage)
    indexes_rebuilt: list[str] = field(default_factory=list)  # "index", "timeindex"
    problem: str | None = None
    deleted: bool = False  # removed because an earlier segment was corrupt
    trusted_bytes: int = 0  # attach: bytes taken on the published numbers, neither read nor CRC'd

    @property
    def eventful(self) -> bool:
        return bool(self.bytes_truncated or self.indexes_rebuilt or self.deleted or self.problem)

    def __str__(self) -> str:
        parts = [f"segment {self.base_offset}"]
        if self.deleted:
            parts.append(
                f"deleted (after an earlier corrupt segment), {self.offsets_truncated} offsets")
        if self.bytes_truncated:
            parts.append(
                f"truncated {self.bytes_truncated} bytes at byte {self.truncated_at} "
                f"(offsets from {self.truncated_from_offset}, "
                f"at least {self.offsets_truncated} lost)"
            )
        if self.problem:
            parts.append(f"because: {self.problem}")
        if self.indexes_rebuilt:
            parts.append(f"rebuilt {', '.join(self.indexes_rebuilt)}")
        if len(parts) == 1 and self.trusted_bytes:
            parts.append(
                f"trusted {self.trusted_bytes} bytes, {self.batches_validated} batches validated "
                f"from byte {self.scanned_from}")
        if len(parts) == 1:
            parts.append(
                f"ok, {self.batches_validated} batches validated from byte {self.scanned_from}")
        return ": ".join(parts[:1]) + ": " + "; ".join(parts[1:])


@dataclass
class RecoveryReport:
    """What ``PartitionLog.open`` found and did. ``str()`` is a readable multi-line summary."""

    directory: str
    clean_shutdown: bool
    segments: list[SegmentRecovery] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    attached: bool = False  # opened on the numbers a killed worker published (see attach.py)
    attach_refused: str | None = None  # attach was asked for, the files disagreed: full recovery
    attach_offset: int | None = None  # the published log end offset attach started from
    # what partition.state said when the log was opened: (log start or None for the first
    # segment's base, clean shutdown); None when it was damaged. An absent file reads as
    # (None, False), which is what an open writes for a new log: the open skips that write.
    state_on_disk: tuple[int | None, bool] | None = None

    @property
    def trusted_bytes(self) -> int:
        return sum(s.trusted_bytes for s in self.segments)

    @property
    def bytes_truncated(self) -> int:
        return sum(s.bytes_truncated for s in self.segments)

    @property
    def offsets_truncated(self) -> int:
        return sum(s.offsets_truncated for s in self.segments)

    @property
    def indexes_rebuilt(self) -> list[tuple[int, str]]:
        return [(s.base_offset, name) for s in self.segments for name in s.indexes_rebuilt]

    @property
    def deleted_segments(self) -> list[int]:
        return [s.base_offset for s in self.segments if s.deleted]

    @property
    def truncated(self) -> bool:
        return any(s.bytes_truncated or s.deleted for s in self.segments)

    @property
    def changed(self) -> bool:
        """Recovery cut data, deleted segments, rebuilt indexes, or refused to attach: worth a
        log line."""
        return self.truncated or bool(self.indexes_rebuilt) or self.attach_refused is not None

    @property
    def corrupt_in_middle(self) -> bool:
        """A non-last segment was damaged: data that may have been acknowledged is gone."""
        return bool(self.deleted_segments)

    def __str__(self) -> str:
        how = "clean shutdown" if self.clean_shutdown else "unclean shutdown"
        lines = [
            f"recovered {self.directory} after {how}: offsets [{self.log_start_offset}, "
            f"{self.log_end_offset}), {self.bytes_truncated} bytes truncated, "
            f"{len(self.indexes_rebuilt)} indexes rebuilt"
        ]
        if self.attached:
            lines.append(
                f"  attached at offset {self.attach_offset}: trusted {self.trusted_bytes} bytes "
                f"in {sum(bool(s.trusted_bytes) for s in self.segments)} segments without "
                f"reading them; validated {sum(s.batches_validated for s in self.segments)} "
                f"batches after the published end")
        if self.attach_refused:
            lines.append(f"  attach refused, recovered from the files: {self.attach_refused}")
        lines += [f"  {note}" for note in self.notes]
        lines += [f"  {s}" for s in self.segments if s.eventful]
        return "\n".join(lines)
