"""Log cleaner benchmarks, each printed next to a baseline measured in the same run.

1. cleaner throughput: ``cleaner.clean`` of a compacted log (N updates over K keys in sealed
   segments: map the dirty section, rewrite every segment, fsync, swap in) in MB of log per
   second, against a raw read-and-write of the same bytes (read each segment in io-buffer
   chunks, write them to a new file, fsync), the ceiling for a cleaner that reads its input
   twice (map, then rewrite) as Kafka's does;
2. produce with the cleaner running: confluent-kafka writing updates to a compacted topic
   with 256 KiB segments on a real appliance whose cleaner runs (backoff 100 ms; dirty ratio
   0.5, Kafka's default, and 0.05, a cleaner that hardly rests), against the same appliance
   with ``log.cleaner.enable=false``; msgs/s of acknowledged updates and the cleaner runs
   made meanwhile. The cleaner's thread shares the worker's GIL with its event loop: that,
   not the disk, is what a busy cleaner takes from produce;
3. the event loop's lag (a 1 ms sleep, how late it wakes) while a thread cleans a log, as a
   worker runs it, against the same loop with no cleaning.

Figures only, no assertions. Run: ``.venv/bin/python perf/bench_cleaner.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from appliance.segments import LogConfig, PartitionLog, cleaner_checkpoint  # noqa: E402
from appliance.segments.cleaner import (  # noqa: E402
    CleanerSettings,
    clean,
    install,
    prepare,
    run,
)
from tests.compaction.logs import write_updates  # noqa: E402
from tests.conftest import Appliance  # noqa: E402

MB = 1e6
CONFIG = LogConfig(segment_bytes=8 << 20, segment_index_bytes=1 << 20, retention_ms=-1,
                   cleanup_policy="compact", file_delete_delay_ms=0)


def _log(directory: str, updates: int, keys: int) -> PartitionLog:
    plog = PartitionLog.open(directory, CONFIG, now_ms=0)
    write_updates(plog, updates, keys, per_batch=20)
    plog.roll(now_ms=1)
    return plog


def bench_cleaner(root: str, updates: int, keys: int) -> tuple[float, float, float, float]:
    """(log MB, cleaner s, raw s, cleaned MB)."""
    plog = _log(os.path.join(root, "c-0"), updates, keys)
    size = plog.size_bytes
    paths = [s.path for s in plog.segments if s.size]
    raw = _raw_copy(paths, os.path.join(root, "raw"))
    start = time.perf_counter()
    clean(plog, checkpoint=None, now_ms=10_000, settings=CleanerSettings())
    elapsed = time.perf_counter() - start
    cleaned = plog.size_bytes
    plog.close()
    return size / MB, elapsed, raw, cleaned / MB


def _raw_copy(paths: list[str], target: str, chunk: int = 512 * 1024) -> float:
    start = time.perf_counter()
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for path in paths:
            source = os.open(path, os.O_RDONLY)
            try:
                while data := os.read(source, chunk):
                    os.write(fd, data)
            finally:
                os.close(source)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def bench_produce(root: str, enabled: bool, updates: int,
                  ratio: str = "0.05") -> tuple[float, int]:
    """(acknowledged msgs/s, cleaner runs) of one appliance."""
    appliance = Appliance(Path(root) / (f"on-{ratio}" if enabled else "off"), settings={
        "log.cleaner.enable": str(enabled).lower(), "log.cleaner.backoff.ms": "100"})
    appliance.start()
    try:
        admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
        admin.create_topics([NewTopic("bench", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(256 * 1024),
            "min.cleanable.dirty.ratio": ratio})])["bench"].result(30)
        producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 5,
                             "batch.size": 65536, "enable.idempotence": True})
        start = time.perf_counter()
        for n in range(updates):
            while True:
                try:
                    producer.produce("bench", key=b"key-%d" % (n % 5000),
                                     value=b"value-%d" % n, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            if n % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        rate = updates / (time.perf_counter() - start)
        runs = 1 if cleaner_checkpoint.read(appliance.log_dirs[0]) else 0
        log_text = appliance.log_text()
        runs = max(runs, log_text.count("klog.cleaner: cleaned bench-0"))
        return rate, runs
    finally:
        appliance.stop()


def bench_loop_lag(root: str, updates: int) -> tuple[list[float], list[float]]:
    """(lags while cleaning, lags while idle) in ms, sorted."""
    plog = _log(os.path.join(root, "lag-0"), updates, 1000)
    job = prepare(plog, checkpoint=None, now_ms=10_000)

    async def probe(until) -> list[float]:
        loop = asyncio.get_running_loop()
        lags = []
        while not until():
            before = loop.time()
            await asyncio.sleep(0.001)
            lags.append((loop.time() - before - 0.001) * 1000)
        return sorted(lags)

    async def cleaning() -> list[float]:
        future = asyncio.get_running_loop().run_in_executor(None, run, job, CleanerSettings())
        lags = await probe(future.done)
        install(plog, await future, now_ms=10_000)
        return lags

    busy = asyncio.run(cleaning())
    deadline = time.monotonic() + 1.0
    idle = asyncio.run(probe(lambda: time.monotonic() > deadline))
    plog.close()
    return busy, idle


def _percentiles(lags: list[float]) -> str:
    def at(q):
        return lags[min(len(lags) - 1, int(len(lags) * q))]
    return f"p50 {at(0.5):5.2f}  p99 {at(0.99):6.2f}  max {lags[-1]:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=str(REPO / "var"))
    args = parser.parse_args()
    updates = 100_000 if args.quick else 400_000
    os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(dir=args.dir, prefix="bench-cleaner-")
    try:
        size, cleaner_s, raw_s, cleaned = bench_cleaner(root, updates, 1000)
        print(f"1. cleaning {size:.1f} MB ({updates} updates over 1000 keys) to "
              f"{cleaned:.2f} MB")
        print(f"   cleaner   {cleaner_s:7.2f} s  {size / cleaner_s:8.1f} MB/s of log")
        print(f"   raw copy  {raw_s:7.2f} s  {size / raw_s:8.1f} MB/s (read + write + fsync)")
        produce = updates * 2
        off = bench_produce(root, False, produce)
        print(f"2. producing {produce} updates over 5000 keys to a compacted topic "
              f"(256 KiB segments)")
        print(f"   cleaner off                 {off[0]:9.0f} msgs/s")
        for ratio in ("0.5", "0.05"):
            on = bench_produce(root, True, produce, ratio)
            print(f"   cleaner on, dirty ratio {ratio:4} {on[0]:9.0f} msgs/s  ({on[1]} cleaner "
                  f"runs meanwhile, {on[0] / off[0]:.2f}x)")
        busy, idle = bench_loop_lag(root, updates)
        print("3. event loop lag (1 ms sleeps)")
        print(f"   while a thread cleans  {_percentiles(busy)}")
        print(f"   idle                   {_percentiles(idle)}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
