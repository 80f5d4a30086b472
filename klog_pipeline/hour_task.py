"""One Spark task of the hourly load: read one offset range with the ``klog`` source's reader,
parse its JSON log lines, and write the events and rejects Parquet files of the hour's
staging directory, all in one Python process.

Why not ``spark.read.format("klog")`` and DataFrame operations: the records would cross from
the source's Python into the JVM, out to Python again to be parsed (``mapInArrow``) and back
(Arrow to rows to Arrow, twice). On one hour of 5 million 200-byte events on ``local[2]``
(perf/bench_pipeline.py, one run) that path did 104k records/s and this one 172k: here the
records never leave the Python process that read them. Inside the task, reading is columnar
(`klog_pipeline.range_reader`, millions of records/s); parsing the JSON (`klog_pipeline.events`) is
most of the task's time. What is shared with the data source
is everything but that detour: the ranges are planned by the same functions
(`klog_pipeline.planning`, so ``--min-partitions`` splits as ``minPartitions`` does) and read by
the same `klog_pipeline.range_reader.read_range` that ``KlogBatchReader.read`` runs. The hour also
has two outputs (events and rejects), which one DataFrame write could not give in one pass.

Files and the commit protocol: task attempt T of Spark partition P writes, for its N-th
range (one per task as the loader plans it), ``events/part-P-T-N.parquet`` and
``rejects/part-P-T-N.parquet`` (names unique per attempt, so a retried or speculative attempt
never clobbers another), fsyncs them, and returns an
`HourCommit` listing them with its counts. The driver gets the commits of the successful
attempts only (Spark's ``collect``) and writes ``_manifest.json``: the files that count and
the per-partition offset spans (count, first, last) the loader checks against its plan.
Files of failed attempts are in no manifest and are deleted before the hour is published.

While a task runs it rewrites ``_progress/part-P-T-N.json`` (records, bytes, done) about twice a
second; the loader's progress bar sums these. The staging directory must be one every
executor can write and the driver can rename from (local, or a shared mount).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from klog_pipeline.event_schema import REJECTS, EventSchema
from klog_pipeline.events import parse_batch
from klog_pipeline.faults import fault_point
from klog_pipeline.files import fsync_file, write_atomic
from klog_pipeline.options import SourceOptions
from klog_pipeline.planning import OffsetRange
from klog_pipeline.range_reader import read_range

ROW_GROUP_ROWS = 128 * 1024
PROGRESS_EVERY_S = 0.5
MANIFEST = "_manifest.json"
PROGRESS_DIR = "_progress"


@dataclass
class HourCommit:
    """One task's outcome, sent to the driver."""

    events_files: list[str] = field(default_factory=list)
    rejects_files: list[str] = field(default_factory=list)
    records: int = 0  # every record read, rejects included
    rejects: int = 0
    value_bytes: int = 0
    out_of_hour: int = 0
    spans: dict[int, list[int]] = field(default_factory=dict)  # partition -> [count, min, max]


@dataclass(frozen=True)
class HourTask:
    """What every task of one hour's job needs: plain values, pickled to the executors."""

    source: SourceOptions
    staging: str
    schema_ddl: str
    start_ms: int
    end_ms: int

    def run(self, ranges: Iterator[OffsetRange]) -> Iterator[HourCommit]:
        """``mapPartitions`` body: one commit per range of this Spark partition."""
        from pyspark import TaskContext

        context = TaskContext.get()
        schema = EventSchema.parse(self.schema_ddl)
        for number, span in enumerate(ranges):
            name = f"part-{context.partitionId():05d}-{context.taskAttemptId()}-{number}"
            files = _TaskFiles(Path(self.staging), name, schema,
                               (self.start_ms * 1000, self.end_ms * 1000))
            for batch in read_range(self.source, span):
                files.add(batch)
                fault_point("task-batch")
            commit = files.finish()
            fault_point("task-done")
            yield commit


def write_manifest(staging: Path, commits: list[HourCommit]) -> dict:
    """Merge the tasks' commits into ``_manifest.json`` (written atomically); returns it."""
    spans: dict[int, list[int]] = {}
    for commit in commits:
        for partition, (count, low, high) in commit.spans.items():
            merge_span(spans, int(partition), count, low, high)
    manifest = {
        "events_files": sorted(f for c in commits for f in c.events_files),
        "rejects_files": sorted(f for c in commits for f in c.rejects_files),
        "records": sum(c.records for c in commits), "rejects": sum(c.rejects for c in commits),
        "value_bytes": sum(c.value_bytes for c in commits),
        "out_of_hour": sum(c.out_of_hour for c in commits),
        "spans": {str(p): s for p, s in sorted(spans.items())},
    }
    write_atomic(staging / MANIFEST, orjson.dumps(manifest))
    return manifest


def merge_span(spans: dict[int, list[int]], partition: int, count: int, low: int,
               high: int) -> None:
    if partition in spans:
        old = spans[partition]
        spans[partition] = [old[0] + count, min(old[1], low), max(old[2], high)]
    else:
        spans[partition] = [count, low, high]


class _TaskFiles:
    """One task's two Parquet files, its counters and its progress file."""

    def __init__(self, staging: Path, name: str, schema: EventSchema, hour_us: tuple[int, int]):
        self.staging = staging
        self.name = name
        self.schema = schema
        self.hour_us = hour_us
        self.commit = HourCommit()
        self._events: list[pa.RecordBatch] = []
        self._buffered = 0
        self._rejects: list[pa.RecordBatch] = []
        self._writer: pq.ParquetWriter | None = None
        self._reported = 0.0
        (staging / PROGRESS_DIR).mkdir(parents=True, exist_ok=True)

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._count(batch)
        events, rejects = parse_batch(batch, self.schema)
        if events.num_rows:
            self._events.append(events)
            self._buffered += events.num_rows
            if self._buffered >= ROW_GROUP_ROWS:
                self._flush()
        if rejects is not None:
            self._rejects.append(rejects)
            self.commit.rejects += rejects.num_rows
        if time.monotonic() - self._reported >= PROGRESS_EVERY_S:
            self._progress(done=False)

    def finish(self) -> HourCommit:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            fsync_file(self.staging / self.commit.events_files[0])
        if self._rejects:
            relative = f"rejects/{self.name}.parquet"
            (self.staging / "rejects").mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_batches(self._rejects, schema=REJECTS),
                           self.staging / relative)
            fsync_file(self.staging / relative)
            self.commit.rejects_files.append(relative)
        self._progress(done=True)
        return self.commit

    def _count(self, batch: pa.RecordBatch) -> None:
        commit = self.commit
        commit.records += batch.num_rows
        commit.value_bytes += pc.sum(pc.binary_length(batch.column("value"))).as_py() or 0
        stamps = batch.column("timestamp").cast(pa.int64())
        low, high = self.hour_us
        outside = pc.or_(pc.less(stamps, low), pc.greater_equal(stamps, high))
        commit.out_of_hour += pc.sum(outside).as_py() or 0
        partitions, offsets = batch.column("partition"), batch.column("offset")
        present = pc.unique(partitions).to_pylist()
        for partition in present:
            mine = offsets if len(present) == 1 else offsets.filter(
                pc.equal(partitions, partition))
            bounds = pc.min_max(mine).as_py()
            merge_span(commit.spans, partition, len(mine), bounds["min"], bounds["max"])

    def _flush(self) -> None:
        if not self._events:
            return
        if self._writer is None:
            relative = f"events/{self.name}.parquet"
            (self.staging / "events").mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.staging / relative, self.schema.arrow(),
                                            compression="snappy")
            self.commit.events_files.append(relative)
        self._writer.write_table(pa.Table.from_batches(self._events, schema=self.schema.arrow()))
        self._events, self._buffered = [], 0

    def _progress(self, *, done: bool) -> None:
        self._reported = time.monotonic()
        path = self.staging / PROGRESS_DIR / f"{self.name}.json"
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_bytes(orjson.dumps({"records": self.commit.records,
                                       "bytes": self.commit.value_bytes, "done": done}))
        os.replace(temp, path)
