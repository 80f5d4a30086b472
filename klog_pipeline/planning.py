"""Offset ranges: resolving the options' bounds into ``[start, end)`` per partition, splitting
big ranges into more Spark tasks, capping a micro-batch. Pure: the offsets the appliance
reported come in as plain dicts (see `klog_pipeline.lookups` for who asks).

An `OffsetRange` is one Spark task's work and travels to an executor pickled, so it holds
plain values only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from klog_pipeline.options import EARLIEST, LATEST, Bound

log = logging.getLogger("klog_pipeline")

TP = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of ``topic``'s ``partition``: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


class DataLossError(ValueError):
    """Offsets that should be read are gone from the log (retention deleted them)."""


def data_loss_message(topic: str, partition: int, start: int, log_start: int) -> str:
    return (f"klog: offsets {start}..{log_start - 1} of {topic}[{partition}] are no longer in "
            f"the log (retention deleted them; the log now starts at {log_start}). Set "
            f"failOnDataLoss=false to skip them and read from {log_start}.")


def resolve(bound: Bound, tps: list[TP], earliest: dict[TP, int], latest: dict[TP, int],
            for_times: Callable[[dict[TP, int]], dict[TP, int | None]], *, role: str,
            strategy: str = "error") -> dict[TP, int]:
    """Offsets of ``bound`` for every partition in ``tps``. ``for_times`` answers ListOffsets
    by timestamp (None: no record that recent). ``role`` is "start" or "end": an end
    timestamp without a match means latest; a start follows ``strategy``."""
    if bound.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if bound.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if bound.kind == "offsets":
        given = bound.as_dict()
        missing = [f"{t}[{p}]" for t, p in tps if (t, p) not in given]
        if missing:
            raise ValueError(f"the {role}ing offsets JSON must name every partition; missing "
                             f"{', '.join(missing)} (use -2 for earliest, -1 for latest)")
        special = {EARLIEST: earliest, LATEST: latest}
        return {tp: special[given[tp]][tp] if given[tp] < 0 else given[tp] for tp in tps}
    wanted = ({tp: bound.timestamp for tp in tps} if bound.kind == "timestamp"
              else _per_partition_timestamps(bound, tps, role))
    found = for_times(wanted)
    out = {}
    for tp in tps:
        offset = found.get(tp)
        if offset is None:
            if role == "start" and strategy == "error":
                raise ValueError(f"no record of {tp[0]}[{tp[1]}] at or after the starting "
                                 f"timestamp {wanted[tp]} (set "
                                 "startingOffsetsByTimestampStrategy=latest to start at the end)")
            offset = latest[tp]
        out[tp] = offset
    return out


def _per_partition_timestamps(bound: Bound, tps: list[TP], role: str) -> dict[TP, int]:
    given = bound.as_dict()
    missing = [f"{t}[{p}]" for t, p in tps if (t, p) not in given]
    if missing:
        raise ValueError(f"{role}ingOffsetsByTimestamp must name every partition; missing "
                         f"{', '.join(missing)}")
    return {tp: given[tp] for tp in tps}


def plan_ranges(tps: list[TP], starts: dict[TP, int], ends: dict[TP, int],
                earliest: dict[TP, int], latest: dict[TP, int], *,
                fail_on_data_loss: bool) -> list[OffsetRange]:
    """One range per partition, checked against the log: a start below the log start is data
    loss (DataLossError, or skipped and logged); an end past the high watermark or below the
    start is the caller's mistake (ValueError)."""
    ranges = []
    for tp in sorted(tps):
        topic, partition = tp
        start, end = starts[tp], ends[tp]
        if end > latest[tp]:
            raise ValueError(f"the ending offset {end} of {topic}[{partition}] is past its "
                             f"high watermark {latest[tp]}")
        if start < earliest[tp]:
            if fail_on_data_loss:
                raise DataLossError(data_loss_message(topic, partition, start, earliest[tp]))
            log.warning("%s", data_loss_message(topic, partition, start, earliest[tp]))
            start = min(earliest[tp], end)
        if end < start:
            raise ValueError(f"the ending offset {end} of {topic}[{partition}] is before its "
                             f"starting offset {start}")
        ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def split_ranges(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Drop empty ranges; with ``min_partitions`` above the number left, cut them into that
    many pieces in all (as long as there are offsets enough), each range getting a share in
    proportion to its size (largest remainder, at least one), cut into near-equal pieces."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    shares = apportion([r.size for r in ranges], min_partitions)
    out = []
    for r, pieces in zip(ranges, shares):
        pieces = min(pieces, r.size)
        bounds = [r.start + r.size * i // pieces for i in range(pieces + 1)]
        out.extend(OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:]))
    return out


def apportion(sizes: list[int], total: int) -> list[int]:
    """Integers proportional to ``sizes``, each at least 1, summing to ``total`` (given
    ``total >= len(sizes)``); ties go to the earlier size. Hamilton's method."""
    whole = sum(sizes)
    quotas = [s * total / whole for s in sizes]
    shares = [max(1, int(q)) for q in quotas]
    order = sorted(range(len(sizes)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    surplus = total - sum(shares)
    for i in order:
        if surplus <= 0:
            break
        shares[i] += 1
        surplus -= 1
    while surplus < 0:  # the floor of 1 gave small sizes more than their quota
        largest = max(range(len(sizes)), key=lambda i: (shares[i], -i))
        if shares[largest] == 1:
            break  # total < len(sizes): one each is the least there can be
        shares[largest] -= 1
        surplus += 1
    return shares


def cap_offsets(starts: dict[TP, int], ends: dict[TP, int], max_rows: int) -> dict[TP, int]:
    """Ends moved back so that at most ``max_rows`` offsets lie between starts and ends in
    all, each partition's share in proportion to its backlog (Spark's rule for
    maxOffsetsPerTrigger); at least one offset moves when any is waiting."""
    backlog = {tp: max(0, ends[tp] - starts[tp]) for tp in ends}
    waiting = sum(backlog.values())
    if waiting <= max_rows:
        return dict(ends)
    tps = sorted(tp for tp in backlog if backlog[tp])
    quotas = {tp: backlog[tp] * max_rows / waiting for tp in tps}
    shares = {tp: int(quotas[tp]) for tp in tps}
    left = max_rows - sum(shares.values())
    for tp in sorted(tps, key=lambda tp: -(quotas[tp] - shares[tp])):
        if left <= 0:
            break
        shares[tp] += 1
        left -= 1
    return {tp: starts[tp] + shares[tp] if tp in shares else ends[tp] for tp in ends}
