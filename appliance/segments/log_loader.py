"""Opening a partition directory: find the segments, recover them, report (Kafka's LogLoader).

Rules:

- An interrupted cleaning is settled first (``cleaning_swap.complete_swaps``: a ``.cleaned``
  is removed, a ``.swap`` installed), then leftovers of a crash are removed: ``*.deleted``
  (retention or the cleaner had already decided), ``*.tmp``, and indexes without a ``.log``.
- The last segment is always validated from its last good index entry to its end; after an
  unclean shutdown (no ``clean_shutdown=1`` in ``partition.state``) every segment's tail is, and
  ``verify="full"`` validates every batch of every segment.
- A bad batch in the *last* segment is a torn write: cut it and what follows (it was never
  acknowledged as durable). A bad batch in an earlier segment is corruption of data that may
  have been acknowledged: like Kafka, truncate there and delete every later segment, so the log
  stays contiguous; this is logged at ERROR and flagged in the report (``corrupt_in_middle``).
- After an unclean shutdown every segment is fdatasynced once recovered, so what survived in
  the page cache is durable before the log reports it as such.
- With an attach point (a worker restarted on the same machine, ``attach.py``), the numbers the
  dead owner published replace the validation of everything below them; if the files disagree
  with them, the rules above apply and the report says why.

What can fail: ``OSError`` (the caller wraps it in StorageError). Bad data never raises.
"""

from __future__ import annotations

import logging
import os

from .attach import AttachPoint, AttachRefused, attach_segments
from .cleaning_swap import complete_swaps
from .config import LogConfig
from .layout import leftover_files, list_segment_bases, read_state
from .recovery_scan import RecoveryReport, SegmentRecovery
from .segment import LogSegment
from .segment_repair import recover_segment, restore_rolling_base

log = logging.getLogger("klog.segments")


def load_segments(
    directory: str, config: LogConfig, *, now_ms: int, verify: str,
    attach: AttachPoint | None = None,
) -> tuple[list[LogSegment], RecoveryReport, int | None]:
    """Open and recover every segment of ``directory``; the last one is left active.
    ``attach``: first try to open on the numbers a killed owner published (``attach.py``);
    when the files disagree, recover as usual and say why in ``report.attach_refused``.
    Returns (segments, report, log start offset from the state file or None)."""
    if verify not in ("tail", "full"):
        raise ValueError(f"verify must be 'tail' or 'full', got {verify!r}")
    state = read_state(directory)
    report = RecoveryReport(directory, clean_shutdown=state.clean_shutdown)
    if state.problem:
        report.notes.append(state.problem)
    else:
        report.state_on_disk = (state.log_start_offset, state.clean_shutdown)
    report.notes.extend(complete_swaps(directory))
    bases = list_segment_bases(directory)
    leftovers = leftover_files(directory, bases)
    for path in leftovers:
        os.unlink(path)
    if leftovers:
        report.notes.append(
            f"removed {len(leftovers)} leftover files (.deleted, .tmp, orphan indexes)")
    if attach is not None and verify == "full":
        report.notes.append("verify='full' asked for: the attach point was not used")
    elif attach is not None:
        try:
            segments = attach_segments(directory, config, attach, bases, now_ms=now_ms,
                                       report=report)
        except AttachRefused as exc:
            report.attach_refused = str(exc)
        else:
            return segments, report, state.log_start_offset
    if not bases:
        report.clean_shutdown = True
        report.notes.append("new log" if state.log_start_offset is None else "no segments")
        start = state.log_start_offset or 0
        return [LogSegment.create(directory, start, config, now_ms=now_ms)], report, start
    segments: list[LogSegment] = []
    try:
        _recover_all(directory, config, bases, state.clean_shutdown, verify, now_ms, segments,
                     report)
        if not state.clean_shutdown:
            for segment in segments:
                segment.flush()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments, report, state.log_start_offset


def _recover_all(directory, config, bases, clean, verify, now_ms, segments, report) -> None:
    for i, base in enumerate(bases):
        last = i == len(bases) - 1
        next_base = None if last else bases[i + 1]
        mode = "full" if verify == "full" else ("tail" if last or not clean else "trust")
        segment = LogSegment(directory, base, config, now_ms=now_ms)
        segments.append(segment)
        recovered = recover_segment(segment, mode=mode, active=last, next_base=next_base)
        report.segments.append(recovered)
        if last:
            break
        if recovered.bytes_truncated or segment.next_offset > next_base:
            _drop_later_segments(directory, config, bases[i + 1 :], segment, recovered, report,
                                 now_ms)
            segment.activate()
            break
        if segment.next_offset < next_base:
            report.notes.append(
                f"offsets [{segment.next_offset}, {next_base}) are missing between segments "
                f"{base} and {next_base}"
            )
    restore_rolling_base(segments[-1], now_ms)


def _drop_later_segments(directory, config, doomed_bases, segment, recovered, report,
                         now_ms) -> None:
    """Corruption inside a non-last segment: delete what follows, so offsets stay contiguous."""
    if recovered.problem is None:
        recovered.problem = (
            f"segment ends at offset {segment.next_offset}, past the next segment's base"
        )
    for base in doomed_bases:
        doomed = LogSegment(directory, base, config, now_ms=now_ms)
        lost = SegmentRecovery(base, doomed.path, deleted=True)
        lost.offsets_truncated = max(0, _next_offset_of(doomed) - base)
        doomed.close()
        doomed.remove_files()
        report.segments.append(lost)
    log.error(
        "corruption in the middle of %s: truncated segment %d at byte %s (%s) and deleted %d "
        "later segments; data that may have been acknowledged is lost",
        directory, segment.base_offset, recovered.truncated_at, recovered.problem,
        len(doomed_bases),
    )


def _next_offset_of(segment: LogSegment) -> int:
    """Best effort, for the report: the last offset found by walking the headers."""
    next_offset = segment.base_offset
    try:
        for _, header in segment.headers(0, segment.file_size):
            next_offset = header.next_offset
    except Exception:  # noqa: BLE001 - garbage is expected here; the count is a lower bound
        pass
    return next_offset
