"""A worker's log cleaner: compacts the partitions this worker owns (Kafka's LogCleaner).

Every ``log.cleaner.backoff.ms`` the cleaner looks at the worker's compacted logs
(``cleanup.policy`` with ``compact``; internal topics compact themselves by snapshot), takes
the dirtiest ones that ``cleaning_plan.needs_cleaning`` accepts, and cleans up to
``log.cleaner.threads`` of them at once. In klog a "thread" is a partition being cleaned in a
thread of this worker's own pool: the worker's logs share one disk, so more than one at a
time mostly competes for it, and every such thread takes the GIL from the event loop in
slices (the switch interval, 5 ms); 1 is the default, as Kafka's.

A run's three steps (``appliance/segments/cleaner.py``): ``prepare`` on the loop (cheap: stat
and open the sealed segments), ``run`` in the pool (the CPU and I/O, throttled by
``log.cleaner.io.max.bytes.per.second``), ``install`` on the loop (renames, one trusted
segment open per swap). Produce and fetch go on meanwhile: the active segment is never
touched, readers holding old files keep them until ``file.delete.delay.ms``. The shm entry
does not change (log start, high watermark, active segment stay), it is published anyway.

A partition whose log holds a corrupt batch stops being cleaned (logged at ERROR, counted in
the metrics as uncleanable) and keeps serving; the next restart tries it again. Where each
log's cleaning stopped is kept in the log dir's ``cleaner-offset-checkpoint``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from appliance.config import BrokerConfig
from appliance.segments import cleaner, cleaner_checkpoint, cleaning_plan
from appliance.segments.errors import CorruptRecordError, StorageError
from appliance.workers.cleaner_throttle import Throttler

log = logging.getLogger("klog.cleaner")


@dataclass
class CleanerStatistics:
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    failures: int = 0  # runs that ended in an error (storage, or corruption)
    seconds: float = 0.0  # spent in the pool
    uncleanable: set = field(default_factory=set)  # (topic, partition) with a corrupt batch
    dirty_ratios: dict = field(default_factory=dict)  # (topic, partition) -> last seen

    def document(self) -> dict:
        return {"runs": self.runs, "bytes_read": self.bytes_read,
                "bytes_written": self.bytes_written, "failures": self.failures,
                "seconds": self.seconds,
                "uncleanable": [[t, p] for t, p in sorted(self.uncleanable)],
                "dirty_ratios": [[t, p, r] for (t, p), r in sorted(self.dirty_ratios.items())]}


class LogCleaner:
    """Owned by the worker; :meth:`run` is its task. ``partitions``: the worker's replicas
    (``LocalReplicas``: iterable of ``Partition``)."""

    def __init__(self, partitions, log_dir, config: BrokerConfig, *, clock=time.time):
        self.partitions = partitions
        self.log_dir = log_dir
        self.enabled = config.log_cleaner_enable
        self.backoff_s = config.log_cleaner_backoff_ms / 1000
        self.threads = config.log_cleaner_threads
        self.settings = cleaner.CleanerSettings(
            dedupe_buffer_bytes=config.log_cleaner_dedupe_buffer_size // self.threads,
            io_buffer_bytes=config.log_cleaner_io_buffer_size,
            throttle=Throttler(config.log_cleaner_io_max_bytes_per_second))
        self.clock = clock
        self.stats = CleanerStatistics()
        self.checkpoints = cleaner_checkpoint.read(log_dir)
        self._busy: set[tuple[str, int]] = set()
        self._pool: ThreadPoolExecutor | None = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def run(self) -> None:
        """Clean forever, one pass every backoff (a pass that cleaned goes again at once)."""
        if not self.enabled:
            return
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="klog-cleaner")
        try:
            while True:
                cleaned = await self.clean_pass()
                if not cleaned:
                    await asyncio.sleep(self.backoff_s)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def clean_pass(self) -> int:
        """Clean the dirtiest logs that need it, ``threads`` at once; returns how many."""
        jobs = self._choose()
        if not jobs:
            return 0
        results = await asyncio.gather(*(self._clean(p, job) for p, job in jobs))
        return sum(results)

    def _choose(self) -> list:
        """(partition, job) of the dirtiest cleanable logs, at most ``threads``."""
        now_ms = self.now_ms()
        candidates = []
        for partition in self.partitions:
            key = partition.key
            plog = partition.log
            if (not plog.config.compact or key[0].startswith("__") or key in self._busy
                    or key in self.stats.uncleanable or plog.closed):
                continue
            range_ = cleaner.cleanable_range(plog, self.checkpoints.get(key), now_ms)
            self.stats.dirty_ratios[key] = round(range_.dirty_ratio, 4)
            if cleaning_plan.needs_cleaning(
                    range_, cleaner.segment_stats(plog), now_ms=now_ms,
                    min_cleanable_dirty_ratio=plog.config.min_cleanable_dirty_ratio,
                    max_compaction_lag_ms=plog.config.max_compaction_lag_ms):
                candidates.append((range_.dirty_ratio, key, partition))
        candidates.sort(key=lambda c: c[0], reverse=True)
        jobs = []
        for _, key, partition in candidates[: self.threads]:
            try:
                job = cleaner.prepare(partition.log, checkpoint=self.checkpoints.get(key),
                                      now_ms=now_ms,
                                      last_batch_of_producer=partition.producers
                                      .last_batch_offsets())
            except StorageError as exc:
                log.error("cleaning %s-%d could not start: %s", *key, exc)
                self.stats.failures += 1
                continue
            if job is not None:
                jobs.append((partition, job))
        return jobs

    async def _clean(self, partition, job) -> int:
        key = partition.key
        self._busy.add(key)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            result = await loop.run_in_executor(self._pool, cleaner.run, job, self.settings)
        except asyncio.CancelledError:
            job.cancelled.set()  # the thread stops at its next batch and removes its files
            raise
        except cleaner.CleaningAborted as exc:
            log.info("cleaning %s-%d aborted: %s", *key, exc)
            return 0
        except CorruptRecordError as exc:
            log.error("cleaning %s-%d stopped: %s; the partition is no longer cleaned (it "
                      "keeps serving)", *key, exc)
            self.stats.uncleanable.add(key)
            self.stats.failures += 1
            return 0
        except StorageError as exc:
            log.error("cleaning %s-%d failed: %s", *key, exc)
            self.stats.failures += 1
            return 0
        finally:
            self._busy.discard(key)
            self.stats.seconds += time.monotonic() - started
        return await self._install(partition, result)

    async def _install(self, partition, result) -> int:
        key = partition.key
        try:
            installed = cleaner.install(partition.log, result, now_ms=self.now_ms())
        except StorageError as exc:
            log.error("installing the cleaned segments of %s-%d failed: %s", *key, exc)
            self.stats.failures += 1
            return 0
        self.stats.runs += 1
        self.stats.bytes_read += result.bytes_read
        self.stats.bytes_written += result.bytes_written
        if installed == len(result.swaps) and result.cleaned_through >= 0:
            self.checkpoints[key] = result.cleaned_through
            await self._write_checkpoint()
        if installed:
            partition.publish()
        log.info("cleaned %s-%d: %d segment(s) swapped in, %d bytes read, %d written",
                 *key, installed, result.bytes_read, result.bytes_written)
        return 1

    async def _write_checkpoint(self) -> None:
        live = {p.key for p in self.partitions}
        entries = {k: v for k, v in self.checkpoints.items() if k in live}
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, cleaner_checkpoint.write, self.log_dir,
                                       entries)
        except OSError as exc:
            log.warning("cannot write the cleaner checkpoint in %s: %s", self.log_dir, exc)
