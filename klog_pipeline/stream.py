"""The ``klog`` streaming reader: ``spark.readStream.format("klog")``.

The stream offset is Spark's Kafka JSON, ``{"clicks": {"0": 1234, "1": 987}}``: per
partition, the next offset to read. Spark checkpoints it, so a restarted query resumes where
the last committed micro-batch ended and every record is delivered once per query.

- ``initialOffset``: ``startingOffsets`` / ``startingTimestamp`` resolved (default latest);
- ``latestOffset(start, limit)``: the high watermarks, capped by ``maxOffsetsPerTrigger``
  (in proportion to each partition's backlog) and, under ``trigger(availableNow=True)``, by
  the watermarks taken when the query started;
- partitions that appear later start at their earliest offset;
- ``partitions(start, end)``: one range per partition (split by ``minPartitions``); a start
  that retention deleted fails the batch or, with ``failOnDataLoss=false``, is skipped.

The reader lives in one driver-side Python process for the whole query (so the availableNow
target kept on ``self`` holds); ``read`` runs on executors with the pickled reader.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from klog_pipeline.lookups import LogLookups
from klog_pipeline.options import SourceOptions
from klog_pipeline.planning import cap_offsets, plan_ranges, resolve, split_ranges
from klog_pipeline.range_reader import read_range

TP = tuple[str, int]


def to_json_offsets(offsets: dict[TP, int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json_offsets(offsets: dict) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


class KlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.source_options = options
        self._target: dict[TP, int] | None = None  # availableNow: the end of this query

    def initialOffset(self) -> dict:
        options = self.source_options
        with LogLookups.for_options(options) as lookups:
            tps = lookups.partitions(options.subscription)
            earliest, latest = lookups.earliest(tps), lookups.latest(tps)
            starts = resolve(options.starting, tps, earliest, latest, lookups.for_times,
                             role="start", strategy=options.timestamp_strategy)
        return to_json_offsets(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.source_options.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._watermarks()[1]

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        earliest, latest = self._watermarks()
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, earliest[tp])) for tp in latest}
        begun = {**earliest, **from_json_offsets(start)}
        latest = {tp: max(latest[tp], begun[tp]) for tp in latest}  # never move backwards
        if isinstance(limit, ReadMaxRows):
            latest = cap_offsets(begun, latest, limit.max_rows)
        return to_json_offsets(latest)

    def reportLatestOffset(self) -> dict:
        return to_json_offsets(self._watermarks()[1])

    def partitions(self, start: dict, end: dict):
        ends = from_json_offsets(end)
        if not ends:
            return []
        with LogLookups.for_options(self.source_options) as lookups:
            tps = sorted(ends)
            earliest, latest = lookups.earliest(tps), lookups.latest(tps)
        starts = {**{tp: earliest[tp] for tp in tps}, **from_json_offsets(start)}
        ranges = plan_ranges(tps, {tp: min(starts[tp], ends[tp]) for tp in tps}, ends,
                             earliest, {tp: max(latest[tp], ends[tp]) for tp in tps},
                             fail_on_data_loss=self.source_options.fail_on_data_loss)
        return split_ranges(ranges, self.source_options.min_partitions)

    def read(self, partition):
        return read_range(self.source_options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint is the consumer's state (no group is needed)."""

    def _watermarks(self) -> tuple[dict[TP, int], dict[TP, int]]:
        with LogLookups.for_options(self.source_options) as lookups:
            tps = lookups.partitions(self.source_options.subscription)
            return lookups.earliest(tps), lookups.latest(tps)
