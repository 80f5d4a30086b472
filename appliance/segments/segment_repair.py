"""Bringing a segment's files back in line with its valid data: recovery, index rebuild, truncation.

Three depths of recovery, chosen by the log for each segment when it opens:

- ``trust``: a sealed segment after a clean shutdown. Indexes are loaded and bounds-checked
  (monotonic entries, positions inside the file); sizes come from the file; nothing is read.
- ``tail``: the last segment always, and every segment after an unclean shutdown. Validation
  resumes at the last index entry that still points at a good batch (Kafka re-validates from its
  recovery point; we have no checkpoint of it, and data before the last index entry was written
  before that entry was), and runs to the end of the file; a bad batch and everything after it
  are cut off.
- ``full``: every batch of the segment is validated and both indexes are rebuilt; used when an
  index is missing or damaged, or when the operator asks for ``verify="full"``.

What can fail: ``OSError`` from the file operations (the log wraps it in StorageError). Bad
*data* never raises: it is truncated and reported in a :class:`SegmentRecovery`.
"""

from __future__ import annotations

import mmap

from klog.protocol.record_batch import CorruptBatchError, check_batch

from .lookup import translate_offset
from .policy import INT32_MAX
from .recovery_scan import SegmentRecovery, count_plausible_offsets, garbage_end, scan_segment
from .segment import LogSegment

_MAX_ENTRY_CHECKS = 32  # entries tried from the end before the index is rebuilt from scratch


def recover_segment(
    segment: LogSegment, *, mode: str, active: bool, next_base: int | None
) -> SegmentRecovery:
    """Load ``segment``'s indexes, validate per ``mode``, cut a bad tail, and, when ``active``,
    leave it mapped for appends. ``next_base`` is the following segment's base offset."""
    report = SegmentRecovery(segment.base_offset, segment.path)
    file_size = segment.file_size
    max_relative = INT32_MAX if next_base is None else max(0, next_base - 1 - segment.base_offset)
    writable = active or mode != "trust"
    for index in (segment.index, segment.time_index):
        index.load(active=writable, max_relative_offset=max_relative,
                   max_position=max(file_size, 1))
    damaged = _damaged_indexes(segment)
    if mode == "trust" and not damaged:
        segment.size, segment.next_offset = file_size, next_base
        restore_max_timestamp(segment)
        segment.drop_index_pages()
        return report
    if not writable:
        segment.index.activate()
        segment.time_index.activate()
    if active:
        segment.activate(min_capacity=file_size)
    if damaged or mode == "full":
        report.indexes_rebuilt = damaged
        validate_from(segment, report, 0, segment.base_offset, active)
    else:
        start, expected, dropped = _resume_point(segment)
        if dropped:
            report.indexes_rebuilt = ["index"]
        validate_from(segment, report, start, expected, active)
    if not active:
        segment.seal_indexes()
    segment.drop_index_pages()
    return report


def rebuild_indexes(segment: LogSegment) -> SegmentRecovery:
    """Rebuild both indexes of an open segment from its ``.log`` (after a lookup met a bad
    entry). Batches are validated on the way, but nothing is cut while the log is online: a bad
    batch stops the indexing and is named in ``problem`` for the log to report loudly."""
    report = SegmentRecovery(segment.base_offset, segment.path,
                             indexes_rebuilt=["index", "timeindex"])
    for index in (segment.index, segment.time_index):
        index.damaged = True  # zero the whole file, not just the entries believed valid
        index.activate()
        index.reset()
    segment._bytes_since_index = 0
    restore_max_timestamp(segment)
    buf, _, temporary = _source(segment)
    try:
        result = scan_segment(buf, 0, segment.size, segment.base_offset, segment.track_batch)
    finally:
        if temporary is not None:
            temporary.close()
    report.batches_validated = result.batches
    report.problem = result.problem
    if not segment.active:
        segment.seal_indexes()
    return report


def truncate_segment(segment: LogSegment, offset: int) -> int:
    """Remove the batch holding ``offset`` and everything after it (whole batches, as Kafka
    does: the new end offset may be below ``offset``). The segment must be active.
    Returns the bytes removed. Raises OSError."""
    found = translate_offset(segment, offset)
    if found is None:
        return 0
    position, header = found
    removed = segment.size - position
    segment.index.truncate_to(header.base_offset)
    segment.time_index.truncate_to(header.base_offset)
    segment.truncate_file(position)
    segment.next_offset = header.base_offset
    restore_max_timestamp(segment)
    entries = segment.index.entries
    last_indexed = segment.index.entry_at(entries - 1)[1] if entries else 0
    for _, batch in segment.headers(last_indexed, segment.size):  # batches after the last entry
        if batch.max_timestamp > segment.max_timestamp:
            segment.max_timestamp = batch.max_timestamp
            segment.offset_of_max_timestamp = batch.last_offset
    segment._bytes_since_index = segment.size - last_indexed
    return removed


def _damaged_indexes(segment: LogSegment) -> list[str]:
    damaged = []
    if segment.index_missing or segment.index.damaged:
        damaged.append("index")
    if segment.time_index_missing or segment.time_index.damaged:
        damaged.append("timeindex")
    return damaged


def restore_max_timestamp(segment: LogSegment) -> None:
    """The segment's max timestamp as its time index's last entry says (sealed segments record
    their final max there; an active one's batches after the last entry must be re-tracked)."""
    last = segment.time_index.last_entry()
    segment.max_timestamp, segment.offset_of_max_timestamp = last or (-1, segment.base_offset)


def restore_rolling_base(segment: LogSegment, now_ms: int) -> None:
    """After a restart, ``segment.ms`` counts from the active segment's first batch timestamp
    (Kafka's rule), not from the open."""
    if segment.size:
        first = next(segment.headers(0, segment.size))[1]
        if 0 < first.max_timestamp <= now_ms:
            segment.rolling_base_ms = first.max_timestamp


def _source(segment: LogSegment):
    """A temporary read-only map of the whole ``.log`` to validate: (buffer, end, to close)."""
    size = segment.file_size
    if size == 0:
        return b"", 0, None
    mapped = mmap.mmap(segment.fd, size, prot=mmap.PROT_READ)
    return mapped, size, mapped


def _resume_point(segment: LogSegment) -> tuple[int, int, bool]:
    """(position, expected base offset, entries dropped) to resume validation from: the last
    index entry whose batch is intact. Entries after it are dropped; the scan re-adds them."""
    buf, end, temporary = _source(segment)
    dropped = False
    try:
        for _ in range(_MAX_ENTRY_CHECKS):
            if not segment.index.entries:
                break
            offset, position = segment.index.entry_at(segment.index.entries - 1)
            try:
                header = check_batch(buf, position, end - position)
            except CorruptBatchError:
                header = None
            if header is not None and header.last_offset == offset:
                segment.index.truncate_to(header.base_offset)
                segment.time_index.truncate_to(header.base_offset)
                restore_max_timestamp(segment)
                segment._bytes_since_index = segment.config.index_interval_bytes + 1
                return position, header.base_offset, dropped
            segment.index._truncate_entries(segment.index.entries - 1)
            dropped = True
        segment.index.damaged = segment.time_index.damaged = dropped
        segment.index.reset()
        segment.time_index.reset()
        segment._bytes_since_index = 0
        restore_max_timestamp(segment)
        return 0, segment.base_offset, dropped
    finally:
        if temporary is not None:
            temporary.close()


def validate_from(segment: LogSegment, report: SegmentRecovery, start: int, expected: int,
                  active: bool) -> None:
    """Validate batches from byte ``start`` (whose first batch must have base offset
    ``expected``), re-adding index entries; cut what follows the valid end (zeroed when
    ``active``, trimmed otherwise). Records what it did in ``report``. Raises OSError."""
    if start == 0:
        segment.index.reset()
        segment.time_index.reset()
        segment._bytes_since_index = 0
        restore_max_timestamp(segment)
    buf, end, temporary = _source(segment)
    try:
        result = scan_segment(buf, start, end, expected, segment.track_batch)
        cut_end = garbage_end(buf, result.valid_end, end)  # zeros after the end are no damage
        report.scanned_from = start
        report.batches_validated = result.batches
        segment.size, segment.next_offset = result.valid_end, result.next_offset
        if cut_end > result.valid_end:
            report.bytes_truncated = cut_end - result.valid_end
            report.truncated_at = result.valid_end
            report.truncated_from_offset = result.next_offset
            report.offsets_truncated = count_plausible_offsets(buf, result.valid_end, cut_end)
            report.problem = result.problem or (
                f"non-zero bytes after the end of data at {result.valid_end}")
    finally:
        if temporary is not None:
            temporary.close()
    if active:
        segment.discard_tail(result.valid_end, cut_end)
    elif end > result.valid_end:  # a torn tail, or preallocation a crash left untrimmed
        segment.truncate_file(result.valid_end)
