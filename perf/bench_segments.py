"""Storage engine benchmarks, each printed next to a baseline measured in the same run.

1. append: batches through ``PartitionLog.append`` (validate CRC, assign offsets, index) vs
   ``os.write`` of the same bytes to a plain file;
2. durable appends: N asyncio producers, each waiting for its append to be fdatasync'd through
   the GroupCommitter, vs a raw ``os.write`` + ``os.fdatasync`` loop;
3. lookups: ``read(offset)`` and ``offset_for_timestamp`` on one big segment vs ``bisect`` in a
   Python list of every batch's offset (an in-memory index: the ceiling);
4. (separately) ``perf/bench_mmap_append.py``: the measurement that chose the append path.

Figures only, no assertions. Run: ``.venv/bin/python perf/bench_segments.py [--quick]``.
Files go to a temporary directory under ``--dir`` (default: ``var/`` in the repo) and are
removed afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.segments import GroupCommitter, LogConfig, PartitionLog  # noqa: E402
from tests.segments.batches import make_batch  # noqa: E402

MIB = 1 << 20


def _batch(size: int, seed: int = 1) -> bytes:
    payload = random.Random(seed).randbytes(size - 61)
    return make_batch(records=max(1, size // 1000), payload=payload)


# -- 1. append throughput ------------------------------------------------------------------------


def _engine_append(directory: str, batch: bytes, count: int) -> float:
    log = PartitionLog.open(directory, LogConfig(segment_bytes=1 << 30), now_ms=0)
    start = time.perf_counter()
    for _ in range(count):
        log.append(batch, now_ms=0)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed


def _plain_write(directory: str, batch: bytes, count: int) -> float:
    os.makedirs(directory)
    fd = os.open(os.path.join(directory, "plain"), os.O_WRONLY | os.O_CREAT, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        os.write(fd, batch)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def bench_append(root: str, total_bytes: int, rounds: int) -> None:
    print(f"\n1. append, {total_bytes // MIB} MiB per run, best of {rounds} (MiB/s)")
    print(f"   {'batch':>8}  {'engine':>8}  {'os.write':>8}  ratio  engine appends/s")
    for size in (1024, 16 * 1024, 256 * 1024):
        batch, count = _batch(size), total_bytes // size
        best = {"engine": float("inf"), "plain": float("inf")}
        for r in range(rounds):
            for name, run in (("engine", _engine_append), ("plain", _plain_write)):
                directory = os.path.join(root, f"append-{name}-{size}-{r}")
                os.sync()
                best[name] = min(best[name], run(directory, batch, count))
                shutil.rmtree(directory)
        engine, plain = (count * size / best[k] / MIB for k in ("engine", "plain"))
        print(f"   {size // 1024:>6}Ki  {engine:8.0f}  {plain:8.0f}  {engine / plain:5.2f}"
              f"  {count / best['engine']:12.0f}")


# -- 2. durable appends ----------------------------------------------------------------------------


async def _producers(log: PartitionLog, committer: GroupCommitter, batch: bytes, clients: int,
                     seconds: float) -> int:
    done = 0
    deadline = time.perf_counter() + seconds

    async def producer() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            info = log.append(batch, now_ms=0)
            synced = committer.durable(log, info.last_offset)
            if synced is not None:
                await synced
            done += 1

    await asyncio.gather(*(producer() for _ in range(clients)))
    return done


def _group_commit(directory: str, batch: bytes, clients: int,
                  seconds: float) -> tuple[float, float]:
    log = PartitionLog.open(directory, LogConfig(segment_bytes=256 * MIB), now_ms=0)
    with GroupCommitter() as committer:
        done = asyncio.run(_producers(log, committer, batch, clients, seconds))
        stats = committer.statistics()
    log.close()
    return done / seconds, done / max(stats.syncs, 1)


def _raw_fdatasync(directory: str, batch: bytes, seconds: float) -> float:
    os.makedirs(directory)
    fd = os.open(os.path.join(directory, "plain"), os.O_WRONLY | os.O_CREAT, 0o644)
    done, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        os.write(fd, batch)
        os.fdatasync(fd)
        done += 1
    os.close(fd)
    return done / seconds


def bench_durable(root: str, seconds: float) -> None:
    batch = _batch(1024)
    print(f"\n2. durable 1 KiB appends, {seconds:.1f} s each (appends/s)")
    raw = _raw_fdatasync(os.path.join(root, "raw"), batch, seconds)
    print(f"   baseline: os.write + os.fdatasync loop      {raw:9.0f}")
    for clients in (1, 8, 64, 256):
        rate, per_sync = _group_commit(os.path.join(root, f"gc-{clients}"), batch, clients, seconds)
        print(f"   group commit, {clients:3d} asyncio producers      {rate:9.0f}"
              f"   x{rate / raw:5.1f}   {per_sync:6.1f} appends per fdatasync")


# -- 3. lookups ------------------------------------------------------------------------------------


def bench_lookups(root: str, segment_bytes: int, seconds: float) -> None:
    directory = os.path.join(root, "lookups")
    config = LogConfig(segment_bytes=segment_bytes, segment_index_bytes=10 * MIB, retention_ms=-1)
    log = PartitionLog.open(directory, config, now_ms=0)
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.randint(200, 8000)) for _ in range(64)]
    offsets, start = [], time.perf_counter()
    while True:
        batch = make_batch(records=5, payload=payloads[len(offsets) % 64],
                           base_timestamp=len(offsets), max_timestamp=len(offsets))
        if log.size_bytes + len(batch) > segment_bytes:
            break
        offsets.append(log.append(batch, now_ms=0).base_offset)
    fill_s = time.perf_counter() - start
    assert log.segment_count == 1
    print(f"\n3. lookups in one {log.size_bytes / MIB:.0f} MiB segment of {len(offsets)} batches "
          f"(filled in {fill_s:.1f} s; index every 4 KiB)")
    targets = [rng.randrange(log.log_end_offset) for _ in range(100_000)]

    def rate(function) -> float:
        n, deadline, t0 = 0, time.perf_counter() + seconds, time.perf_counter()
        while time.perf_counter() < deadline:
            for target in targets[n % 90_000 : n % 90_000 + 1000]:
                function(target)
            n += 1000
        return n / (time.perf_counter() - t0)

    base = rate(lambda t: offsets[bisect.bisect_right(offsets, t) - 1])
    read = rate(lambda t: log.read(t, 1))
    by_time = rate(lambda t: log.offset_for_timestamp(t // 5))
    print(f"   baseline: bisect in a list of all offsets  {base:10.0f}/s")
    print(f"   log.read(offset, 1)                        {read:10.0f}/s   x{read / base:.2f}")
    print(f"   log.offset_for_timestamp(ts)               {by_time:10.0f}/s"
          f"   x{by_time / base:.2f}")
    log.close()
    shutil.rmtree(directory)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter runs")
    parser.add_argument("--dir", default=str(REPO / "var"), help="where the files go")
    args = parser.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="klog-bench-", dir=args.dir)
    print(f"klog storage benchmarks in {root} ({os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]})")
    try:
        bench_append(root, (64 if args.quick else 256) * MIB, 2 if args.quick else 3)
        bench_durable(root, 1.0 if args.quick else 3.0)
        bench_lookups(root, (128 if args.quick else 1024) * MIB, 1.0 if args.quick else 3.0)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
