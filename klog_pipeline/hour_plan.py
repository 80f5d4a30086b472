"""Which offsets make up hour H of a topic: ListOffsets by timestamp, per partition.

For each partition, H's records are the offsets from "the first record at or after H's
start" up to "the first record at or after H's end" (exclusive); no record that recent means
the high watermark. The high watermarks are read *first* and everything is clamped to them,
so the plan is one consistent snapshot even while producers append.

Which timestamp type this relies on: the boundaries are exact when timestamps never go back
across an hour boundary within a partition. Topics for logs use **LogAppendTime** (the
broker's clock stamps each batch as it is appended), which guarantees it: the log is in
timestamp order. With CreateTime (the producers' clocks; the tests use it to make synthetic
past hours) it holds as long as producers send in time order across hours; events arriving
late *within* their hour are fine, since they still follow every record of the previous
hour. A record that breaks the rule is still loaded exactly once, into the hour whose offset
range holds it, and counted as ``out_of_hour``.

An hour is complete once it has ended and ``settle_ms`` more have passed (the broker's flush
delay and producers' buffers); only complete hours are final.

Read committed (``kafka.isolation.level=read_committed``): the lookups stop at each
partition's last stable offset, below which every transaction is decided. Where no committed
record at or after H's end lies below it while the high watermark is above it, an open
transaction holds records that may belong to H: the partition is ``held`` and the hour not
complete until that transaction ends (at the latest after its ``transaction.timeout.ms``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from klog_pipeline.hours import Hour
from klog_pipeline.lookups import LogLookups


@dataclass(frozen=True)
class HourPlan:
    topic: str
    hour: Hour
    ranges: dict[int, tuple[int, int]]  # partition -> [start, end)
    log_start: dict[int, int]
    complete: bool
    timestamp_type: str = "unknown"
    held: dict[int, int] = field(default_factory=dict)  # partition -> LSO an open txn holds

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    @property
    def busy_partitions(self) -> list[int]:
        return [p for p, (start, end) in sorted(self.ranges.items()) if end > start]


def plan_hour(lookups: LogLookups, topic: str, hour: Hour, *, now_ms: int,
              settle_ms: int) -> HourPlan:
    """The offset ranges of ``hour`` (see the module docstring)."""
    tps = [(topic, p) for p in sorted(lookups.topic_partitions(topic))]
    latest = lookups.latest(tps)
    log_start = lookups.earliest(tps)
    starts = lookups.for_times({tp: hour.start_ms for tp in tps})
    ends = lookups.for_times({tp: hour.end_ms for tp in tps})
    ranges = {}
    for tp in tps:
        end = min(latest[tp], _or(ends[tp], latest[tp]))
        start = min(end, _or(starts[tp], latest[tp]))
        ranges[tp[1]] = (start, end)
    held = {}
    if lookups.read_committed:
        marks = lookups.high_watermarks(tps)
        held = {tp[1]: latest[tp] for tp in tps if ends[tp] is None and latest[tp] < marks[tp]}
    return HourPlan(topic, hour, ranges, {p: log_start[(topic, p)] for _, p in tps},
                    hour.is_complete(now_ms, settle_ms) and not held,
                    lookups.timestamp_type(topic), held)


def first_hour(lookups: LogLookups, topic: str) -> Hour | None:
    """The hour of the oldest record still in the topic's log (None: the log is empty)."""
    tps = [(topic, p) for p in sorted(lookups.topic_partitions(topic))]
    found = lookups.for_times_with_stamps({tp: 0 for tp in tps})
    stamps = [hit[1] for hit in found.values() if hit is not None]
    return Hour.containing(min(stamps)) if stamps else None


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
