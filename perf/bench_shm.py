"""Shared-memory index benchmarks, each printed next to a baseline measured in the same run.

Baselines: a plain ``struct.pack_into`` / ``unpack_from`` of the same fields on a bytearray (no
seqlock, no validation, no view object): the floor of any Python implementation of the layout.

1. publish_partition (the owner, after every append): without and with a new index entry;
2. read_partition (any worker, per Fetch): a consistent PartitionView, alone and while another
   process publishes to the same slot in a tight loop; and lookup_position;
3. the other per-request writes: add_partition_out, add_worker_counters; find().

Figures only, no assertions. Run: ``.venv/bin/python perf/bench_shm.py [--quick]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import struct
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.shm import Geometry, attach_region, create_region, layout  # noqa: E402

GEOMETRY = Geometry(max_workers=4, max_partitions=1024, index_entries=64)


def _rate(fn, budget_s: float) -> float:
    """Calls per second of ``fn(n)`` (which makes n calls): best of a few rounds."""
    n, best = 1000, 0.0
    while True:
        start = time.perf_counter()
        fn(n)
        elapsed = time.perf_counter() - start
        if elapsed > budget_s / 10:
            break
        n *= 4
    for _ in range(5):
        start = time.perf_counter()
        fn(n)
        best = max(best, n / (time.perf_counter() - start))
    return best


def _row(label: str, rate: float, baseline: float | None = None) -> None:
    extra = f"   {baseline / rate:5.1f}x the baseline's cost" if baseline else ""
    print(f"  {label:<52} {rate / 1e6:7.3f} M/s  {1e6 / rate:7.3f} us/call{extra}")


def _publisher(name: str, slot: int, epoch: int, stop) -> None:
    table = attach_region(name).partitions
    n = 0
    while not stop.is_set():
        for _ in range(256):
            table.publish_partition(slot, epoch, 0, n, n, 0, n, n, (), 1, 100)
            n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (for make perf)")
    budget = 0.2 if parser.parse_args().quick else 1.0
    name = f"/klog-bench-{os.getpid()}"
    region = create_region(name, GEOMETRY)
    try:
        _run(region, budget)
    finally:
        region.unlink()
        region.close()


def _run(region, budget: float) -> None:
    table, out, workers = region.partitions, region.fetch_out, region.workers
    slot = table.allocate_partition("bench", 0, owner=0)
    epoch = table.slot_info(slot).epoch
    entries = [(i * 10, i * 4096) for i in range(1, 65)]
    table.rewrite_partition(slot, epoch, 0, 640, 640, 0, 1 << 20, 1 << 20, entries)
    workers.claim_worker(0, pid=os.getpid(), now_ms=0)
    plain = bytearray(GEOMETRY.total_bytes)
    body = layout.PARTITION_LOG_PUBLISH
    at = GEOMETRY.partition_slot(slot) + layout.PARTITION_DIR_BYTES + 12
    full = struct.Struct("<QII6qQQ")

    def base_pack(n):
        pack = body.pack_into
        for i in range(n):
            pack(plain, at, 64, 0, i, i, 0, i, i, i, i)

    def publish(n):
        pub = table.publish_partition
        for i in range(n):
            pub(slot, epoch, 0, i, i, 0, i, i, (), 1, 100)

    def publish_entry(n):
        pub = table.publish_partition
        for i in range(n):
            pub(slot, epoch, 0, i, i, 0, i, i, ((i, i),), 1, 100)

    def base_unpack(n):
        unpack = full.unpack_from
        for _ in range(n):
            unpack(plain, at - 12)

    def read(n):
        rd = table.read_partition
        for _ in range(n):
            rd(slot)

    def lookup_tail(n):
        lk = table.lookup_position
        for _ in range(n):
            lk(slot, 700)  # past the newest entry: a consumer at the tail

    def lookup_inside(n):
        lk = table.lookup_position
        for i in range(n):
            lk(slot, 10 + (i * 37) % 630)  # a binary search over the 64 entries

    print(f"shm index (region {GEOMETRY.total_bytes / 2**20:.1f} MiB; K={GEOMETRY.index_entries})")
    baseline_pack = _rate(base_pack, budget)
    _row("baseline: struct.pack_into of the 68-byte body", baseline_pack)
    _row("publish_partition, no index entry", _rate(publish, budget), baseline_pack)
    _row("publish_partition, one new index entry", _rate(publish_entry, budget), baseline_pack)
    baseline_unpack = _rate(base_unpack, budget)
    _row("baseline: struct.unpack_from of the 80-byte head", baseline_unpack)
    _row("read_partition -> PartitionView", _rate(read, budget), baseline_unpack)
    _row("lookup_position, tail (read + newest entry)", _rate(lookup_tail, budget),
         baseline_unpack)
    _row("lookup_position, inside the ring (binary search)", _rate(lookup_inside, budget),
         baseline_unpack)

    stop = multiprocessing.get_context("fork").Event()
    writer = multiprocessing.get_context("fork").Process(
        target=_publisher, args=(region.name, slot, epoch, stop))
    writer.start()
    try:
        time.sleep(0.05)
        _row("read_partition, another process publishing", _rate(read, budget), baseline_unpack)
    finally:
        stop.set()
        writer.join()
    published = table.read_partition(slot).records_in

    def count_out(n):
        add = out.add_partition_out
        for _ in range(n):
            add(slot, epoch, 0, 1000, 10)

    def count_worker(n):
        add = workers.add_worker_counters
        for _ in range(n):
            add(0, bytes_out=1000, records_out=10, requests=1)

    def find(n):
        fd = table.find
        for _ in range(n):
            fd("bench", 0)

    _row("add_partition_out (per Fetch partition)", _rate(count_out, budget), baseline_pack)
    _row("add_worker_counters (per request)", _rate(count_worker, budget), baseline_pack)
    _row("find(topic, partition)", _rate(find, budget))
    print(f"  (the concurrent writer published {published:,} times meanwhile)")


if __name__ == "__main__":
    main()
