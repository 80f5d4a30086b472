"""The hourly loader: hour H of a topic from klog into the warehouse, exactly once.

One hour, in order (each step's crash leaves something the next run repairs):

1. Skip if the ledger says H is loaded (unless ``reload``).
2. Plan: the offset ranges of H (`klog_pipeline.hour_plan`); refuse an hour that is not complete
   (unless ``allow_incomplete``) or whose ranges do not join the loaded hours beside it
   (unless ``allow_gap``), with a message naming the partition and the offsets.
3. Stage: one Spark job, one task per offset range (split by ``min_partitions`` as the
   source's ``minPartitions``), each reading its range with the ``klog`` source's reader and
   writing events and rejects Parquet into ``_staging`` (`klog_pipeline.hour_task`, which says why
   the records do not go through a DataFrame). Nothing is visible yet; a crash here leaves
   only staging, which the next run deletes.
4. Verify: the manifest's per-partition spans must be exactly the plan's ranges (count,
   first and last offset), or nothing is published.
5. Publish: if the hour had files (a reload, or a crashed run's leftovers), the ledger first
   marks it ``reloading`` and the old directories are taken out of view; then the staged
   rejects and events directories are renamed into place (two renames: for the instant
   between them an hour's rejects are in view before its events, never a partial table).
6. Record: the ledger entry is written last (atomically). Until then the hour is not done,
   so a crash after step 5 makes the next run load it again and replace the files with the
   same rows.

Catch-up loads every complete hour not yet loaded, oldest first, from the hour of the oldest
record still in the log, and stops at the first hour it cannot load. Hours without records
are recorded without a Spark job. ``now_ms`` is injected, so tests and replays decide what
"complete" means.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from klog_pipeline.event_schema import EventSchema, infer
from klog_pipeline.events import load_events
from klog_pipeline.faults import fault_point
from klog_pipeline.hour_plan import HourPlan, first_hour, plan_hour
from klog_pipeline.hour_task import HourTask, write_manifest
from klog_pipeline.hours import Hour, hours_between, last_complete
from klog_pipeline.ledger import (
    INCOMPLETE,
    LOADED,
    RELOADING,
    HourEntry,
    Ledger,
    contiguity_problems,
    locked,
)
from klog_pipeline.lookups import LogLookups
from klog_pipeline.options import parse_options
from klog_pipeline.planning import OffsetRange, split_ranges
from klog_pipeline.range_reader import read_range
from klog_pipeline.warehouse import Warehouse

SAMPLE_PER_PARTITION = 200


@dataclass(frozen=True)
class LoadSettings:
    bootstrap_servers: str
    topic: str
    warehouse: Path
    schema: str | None = None  # event schema DDL; default: the ledger's, else inferred
    settle_ms: int = 60_000
    min_partitions: int = 0
    allow_gap: bool = False
    allow_incomplete: bool = False
    reload: bool = False
    isolation_level: str = "read_uncommitted"  # read_committed: aborted writes never load


@dataclass
class HourResult:
    hour: Hour
    status: str  # loaded, reloaded, incomplete, empty, skipped, refused, failed
    records: int = 0
    rejects: int = 0
    value_bytes: int = 0
    partitions: int = 0
    out_of_hour: int = 0
    seconds: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status not in ("refused", "failed")


class LoadRefused(Exception):
    """The hour must not be loaded as asked (incomplete, gap, overlap, bad counts)."""


class HourlyLoader:
    """Loads hours of one topic. Use as a context manager: it holds the topic's lock."""

    def __init__(self, spark, settings: LoadSettings, *, now_ms: int, reporter=None):
        if settings.topic.startswith("_"):
            raise ValueError(f"topic {settings.topic!r}: names starting with _ are reserved "
                             "for the warehouse's own directories")
        self.spark = spark
        self.settings = settings
        self.now_ms = now_ms
        self.reporter = reporter
        self.warehouse = Warehouse(settings.warehouse)
        self._lock = locked(self.warehouse.lock_path(settings.topic))
        self.ledger: Ledger | None = None

    def __enter__(self) -> HourlyLoader:
        self._lock.__enter__()
        self.ledger = Ledger.load(self.warehouse.ledger_path(self.settings.topic),
                                  self.settings.topic)
        return self

    def __exit__(self, *exc) -> None:
        self._lock.__exit__(*exc)

    # --- which hours -----------------------------------------------------------------------

    def catch_up(self) -> list[HourResult]:
        """Every complete hour not yet loaded, oldest first; stops at the first failure."""
        with self._lookups() as lookups:
            oldest = first_hour(lookups, self.settings.topic)
        last = last_complete(self.now_ms, self.settings.settle_ms)
        wanted = set(self.ledger.pending())
        if oldest is not None:
            wanted.update(h for h in hours_between(oldest, last) if not self.ledger.done(h))
        results = []
        for hour in sorted(h for h in wanted if h <= last):
            results.append(self.load(hour))
            if not results[-1].ok:
                break
        return results

    def load(self, hour: Hour) -> HourResult:
        """Load one hour (see the module docstring); never raises for a refused or failed
        hour: the result says why."""
        began = time.monotonic()
        try:
            result = self._load(hour)
        except LoadRefused as exc:
            result = HourResult(hour, "refused", message=str(exc))
        except Exception as exc:  # noqa: BLE001 - a Spark or network failure ends this hour
            result = HourResult(hour, "failed", message=_short(exc))
        result.seconds = time.monotonic() - began
        return result

    # --- one hour --------------------------------------------------------------------------

    def _load(self, hour: Hour) -> HourResult:
        settings = self.settings
        entry = self.ledger.hours.get(hour)
        if entry is not None and entry.done and not settings.reload:
            return HourResult(hour, "skipped", entry.records, entry.rejects, entry.value_bytes,
                              sum(end > start for start, end in entry.ranges.values()),
                              entry.out_of_hour, message="already loaded (--reload replaces it)")
        with self._lookups() as lookups:
            plan = plan_hour(lookups, settings.topic, hour, now_ms=self.now_ms,
                             settle_ms=settings.settle_ms)
        self._check(plan)
        schema = self._schema(plan)
        self.warehouse.clear_staging(settings.topic)
        manifest = self._stage(plan, schema) if plan.records else None
        counts = self._publish(plan, manifest, schema, replacing=entry is not None)
        self.warehouse.clear_staging(settings.topic)
        status = ("incomplete" if not plan.complete else "empty" if not plan.records
                  else "reloaded" if entry is not None and entry.done else "loaded")
        return HourResult(hour, status, counts["records"], counts["rejects"],
                          counts["value_bytes"], len(plan.busy_partitions),
                          counts["out_of_hour"], message=_note(plan))

    def _publish(self, plan: HourPlan, manifest: dict | None, schema: EventSchema, *,
                 replacing: bool) -> dict:
        """Steps 5 and 6: old files out of view (marked ``reloading`` first), new files in,
        the ledger entry last. Returns the hour's counts."""
        topic, hour = self.settings.topic, plan.hour
        if replacing or self.warehouse.has_files(topic, hour):
            self._record(hour, HourEntry(RELOADING, plan.ranges), schema)
            self.warehouse.discard_hour(topic, hour)
        if manifest is not None:
            self.warehouse.publish(topic, hour, manifest["staging"], manifest)
        fault_point("before-ledger")
        counts = manifest or {"records": 0, "rejects": 0, "value_bytes": 0, "out_of_hour": 0}
        self._record(hour, HourEntry(
            LOADED if plan.complete else INCOMPLETE, plan.ranges, counts["records"],
            counts["rejects"], counts["value_bytes"], counts["out_of_hour"],
            datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")), schema)
        return counts

    def _check(self, plan: HourPlan) -> None:
        settings = self.settings
        if plan.held and not settings.allow_incomplete:
            where = ", ".join(f"partition {p} at offset {lso}" for p, lso in plan.held.items())
            raise LoadRefused(f"hour {plan.hour} is not complete: an open transaction holds "
                              f"{where} (read_committed; it ends by commit, abort or its "
                              "transaction.timeout.ms; --allow-incomplete loads what is "
                              "committed now)")
        if not plan.complete and not settings.allow_incomplete:
            ready = datetime.fromtimestamp((plan.hour.end_ms + settings.settle_ms) / 1000, UTC)
            raise LoadRefused(f"hour {plan.hour} is not complete before "
                              f"{ready:%Y-%m-%dT%H:%M:%SZ} (--allow-incomplete loads what "
                              "is there now; a later run loads it again)")
        problems = contiguity_problems(self.ledger, plan.hour, plan.ranges, plan.log_start)
        if problems and not settings.allow_gap:
            raise LoadRefused("; ".join(problems) + " (--allow-gap loads it anyway)")

    def _schema(self, plan: HourPlan) -> EventSchema:
        if self.settings.schema:
            return EventSchema.parse(self.settings.schema)
        if self.ledger.schema is not None:
            return EventSchema.parse(self.ledger.schema)
        return infer(self._sample(plan))

    def _sample(self, plan: HourPlan) -> list[dict]:
        """The first records of each partition's range, parsed (rejects left out)."""
        options = self._source_options()
        values: list = []
        for p in plan.busy_partitions:
            start, end = plan.ranges[p]
            span = OffsetRange(plan.topic, p, start, min(end, start + SAMPLE_PER_PARTITION))
            for batch in read_range(options, span):
                values += batch.column("value").to_pylist()
        events, reasons = load_events(values)
        return [e for i, e in enumerate(events) if i not in reasons]

    def _stage(self, plan: HourPlan, schema: EventSchema) -> dict:
        """Run the hour's Spark job (one task per range, `klog_pipeline.hour_task`) into a new
        staging directory; returns the checked manifest."""
        settings = self.settings
        staging = self.warehouse.new_staging(settings.topic, plan.hour)
        ranges = split_ranges([OffsetRange(plan.topic, p, *plan.ranges[p])
                               for p in plan.busy_partitions], settings.min_partitions)
        task = HourTask(self._source_options(), str(staging), schema.ddl, plan.hour.start_ms,
                        plan.hour.end_ms)
        context = self.spark.sparkContext
        context.setJobDescription(f"klog load-hourly {plan.topic} {plan.hour}")
        job = context.parallelize(ranges, len(ranges)).mapPartitions(task.run)
        if self.reporter is not None:
            with self.reporter.tracking(plan, staging, len(ranges)):
                commits = job.collect()
        else:
            commits = job.collect()
        manifest = write_manifest(staging, commits)
        fault_point("after-stage")
        _verify(plan, manifest, exact=self.settings.isolation_level != "read_committed")
        manifest["staging"] = staging
        return manifest

    def _record(self, hour: Hour, entry: HourEntry, schema: EventSchema) -> None:
        self.ledger.hours[hour] = entry
        self.ledger.schema = schema.ddl
        self.ledger.save()

    def _lookups(self) -> LogLookups:
        return LogLookups.for_options(self._source_options())

    def _source_options(self):
        options = {"bootstrap.servers": self.settings.bootstrap_servers,
                   "subscribe": self.settings.topic, "failOnDataLoss": "true"}
        if self.settings.isolation_level != "read_uncommitted":
            options["kafka.isolation.level"] = self.settings.isolation_level
        return parse_options(options, streaming=False)


def _verify(plan: HourPlan, manifest: dict, *, exact: bool = True) -> None:
    """The staged records must be exactly the planned offsets, partition by partition. Read
    committed (not ``exact``), a partition's records lie within its planned offsets and are
    at most as many: an aborted transaction's records and the transaction markers take
    offsets that are never delivered."""
    spans = {int(p): s for p, s in manifest["spans"].items()}
    problems = []
    for p, (start, end) in sorted(plan.ranges.items()):
        expected = [end - start, start, end - 1] if end > start else None
        staged = spans.get(p)
        if not exact and (staged is None or staged[0] <= end - start and start <= staged[1]
                          and staged[2] <= end - 1 and staged[0] <= staged[2] - staged[1] + 1):
            continue
        if staged != expected:
            problems.append(f"partition {p}: planned offsets {start}..{end - 1} "
                            f"({end - start}), staged {spans.get(p)} ([count, first, last])")
    if problems:
        raise LoadRefused("the staged hour does not match its plan, not published: "
                          + "; ".join(problems))


def _note(plan: HourPlan) -> str:
    return "" if plan.timestamp_type == "LogAppendTime" else (
        f"timestamps are {plan.timestamp_type}: hour boundaries assume producers' clocks "
        "never go back across an hour")


def _short(exc: Exception) -> str:
    """The first useful line of an error (Spark wraps Python errors in long traces)."""
    text = str(exc)
    for line in text.splitlines():
        if "klog:" in line or "Error:" in line:
            return line.strip()[:400]
    return (text.splitlines() or [type(exc).__name__])[0][:400]
