"""Appliance benchmark (issue 4): what more workers buy, and how fast a killed worker returns.

Figures, each beside a baseline measured in the same run:
- produce throughput with 1 worker vs 2 workers (two log dirs, two producer processes sending
  pre-built 1 MiB batches of 200-byte messages, acks=1, pipelined);
- fetch fan-out: four consumer processes reading one hot partition from the start, all from
  its owner vs two from the owner and two from the other worker (shared-memory index +
  sendfile from the owner's segment files);
- time from kill -9 of a worker to serving again with a 1 GiB partition on its disk (re-attach
  from the shared-memory region), vs opening the same partition with normal recovery and with
  a cold rescan (every batch's CRC checked), same run.

Note: on this machine both log dirs live on the same disk; on a host with one disk per
worker the produce figure for 2 workers also gains the second disk's bandwidth.

Run: .venv/bin/python perf/bench_appliance.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import multiprocess  # noqa: E402

from appliance.segments.config import LogConfig  # noqa: E402
from appliance.segments.log import PartitionLog  # noqa: E402
from klog.admin import Admin  # noqa: E402
from klog.protocol.apis import metadata  # noqa: E402
from perf.bench_broker import RawFetcher, bench_produce_raw  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.interop.helpers import create_topic  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

MB = 1_000_000


class _Target:
    """What bench_produce_raw needs of an appliance: a port."""

    def __init__(self, port):
        self.port = port


def _produce_one(args):
    port, topic, messages, partition = args
    return bench_produce_raw(_Target(port), topic, messages, partitions=(partition,))[1]


def produce_throughput(workers: int, messages: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=workers,
                              settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            create_topic(appliance.bootstrap, "load", 2)
            with Admin(appliance.bootstrap) as admin:
                leaders = {p.partition: p.leader for p in admin.describe_topic("load").partitions}
            jobs = [(appliance.port + leaders[p] % 100, "load", messages, p) for p in (0, 1)]
            context = multiprocess.get_context("fork")
            start = time.perf_counter()
            with context.Pool(2) as pool:
                pool.map(_produce_one, jobs)
            elapsed = time.perf_counter() - start
        finally:
            appliance.stop()
    return 2 * messages * 200 / MB / elapsed


def _fetch_one(args):
    port, topic, end = args
    fetcher = RawFetcher(port)
    start = time.perf_counter()
    total = fetcher.fetch_all(topic, 1, {0: end})
    return total, time.perf_counter() - start


def fetch_fan_out(messages: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=2, settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            create_topic(appliance.bootstrap, "hot", 1)
            with Admin(appliance.bootstrap) as admin:
                owner = admin.describe_topic("hot").partitions[0].leader % 100
            _produce_one((appliance.port + owner, "hot", messages, 0))
            with Admin(appliance.bootstrap) as admin:
                end = admin.list_offsets("hot")[0]
            owner_port = appliance.port + owner
            other_port = appliance.port + (1 - owner)
            figures = []
            context = multiprocess.get_context("fork")
            for ports in ([owner_port] * 4, [owner_port, owner_port, other_port, other_port]):
                start = time.perf_counter()
                with context.Pool(4) as pool:
                    results = pool.map(_fetch_one, [(p, "hot", end) for p in ports])
                elapsed = time.perf_counter() - start
                figures.append(sum(r[0] for r in results) / 1e9 / elapsed)
        finally:
            appliance.stop()
    return figures[0], figures[1]


def _serving(port: int) -> bool:
    try:
        client = RawClient(port, timeout_s=0.5)
        client.call(metadata, 8, topics=[])
        client.close()
        return True
    except OSError:
        return False


def kill_to_serving(gib: float) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=2,
                              settings={"log.segment.bytes": str(1 << 30),
                                        "worker.restart.backoff.ms": "1"})
        appliance.start()
        try:
            create_topic(appliance.bootstrap, "big", 2)
            with Admin(appliance.bootstrap) as admin:
                described = admin.describe_topic("big")
            leaders = {p.partition: p.leader % 100 for p in described.partitions}
            partition = next(p for p, w in leaders.items() if w == 1)
            _produce_one((appliance.port + 1, "big", int(gib * (1 << 30) / 200), partition))
            victim = appliance.worker_pid(1)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.perf_counter()
            time.sleep(0.01)
            while not (_serving(appliance.port + 1) and appliance.pids()[1] != victim):
                time.sleep(0.002)
            back_s = time.perf_counter() - killed_at
        finally:
            appliance.stop()
        directory = str(appliance.log_dirs[1] / f"big-{partition}")
        timings = []
        for verify in ("tail", "full"):
            start = time.perf_counter()
            log = PartitionLog.open(directory, LogConfig(segment_bytes=1 << 30), now_ms=0,
                                    verify=verify)
            timings.append(time.perf_counter() - start)
            log.close()
    return back_s, timings[0], timings[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    messages = 300_000 if args.quick else 2_000_000
    one = produce_throughput(1, messages)
    two = produce_throughput(2, messages)
    owner_only, spread = fetch_fan_out(messages)
    back_s, normal_s, full_s = kill_to_serving(0.25 if args.quick else 1.0)
    socket.setdefaulttimeout(None)
    print(f"{'figure':<58}{'klog':>14}{'baseline (same run)':>22}")
    print(f"{'produce MB/s, 2 workers vs 1 worker (2 producers)':<58}{two:>9,.0f} MB/s"
          f"{one:>17,.0f} MB/s")
    print(f"{'fetch GB/s, 4 consumers spread vs all on the owner':<58}{spread:>9.2f} GB/s"
          f"{owner_only:>17.2f} GB/s")
    size = "0.25 GiB" if args.quick else "1 GiB"
    label = f"kill -9 to serving, {size} partition (re-attach)"
    print(f"{label:<58}{back_s * 1000:>11,.0f} ms")
    print(f"{'  open with normal recovery / cold rescan (CRC of all)':<58}"
          f"{normal_s * 1000:>11,.0f} ms{full_s * 1000:>19,.0f} ms")


if __name__ == "__main__":
    main()
