"""Many partitions on one appliance (issue 26): 10,000 partitions beside 2,000, same run.

One appliance of two workers (two log dirs), 64 KiB segments with 64 KiB indexes (the default
10 MiB, preallocated, would take 20 MiB of disk per partition: 200 GB), topics of 500
partitions. For each size: creation time (CreateTopics of every topic, one request each),
Metadata of all topics (median of rounds, one warm connection), descriptors, RSS and mappings
per worker (idle), the restart of the whole appliance to serving, and a worker's kill -9 to
serving again. And a producer writing one message to each partition (librdkafka's defaults,
acks=all, beside acks=1 in the same run): the one place where the partition count reaches
the disk, one sync per log.

The appliance runs under ``prlimit --nofile=H:H`` with H from ``--nofile`` (default: this
shell's hard limit): the supervisor raises the soft limit to H at start.

Measured (2-vCPU VM, 2026-11-28, load average 0.3; fds / RSS MB / mappings per worker idle)::

    partitions  create s  metadata ms  (restarted)  restart s kill -9 s  worker 0 / worker 1
          2000      1.48          4.1          4.2       2.69       1.61  1012/60/2302 1012/58/2301
        10000      7.51         17.8         18.7      10.94       7.96  5012/87/10325 5012/79/10324

One message to each of 10,000 partitions, librdkafka at its defaults (2026-11-30, two rounds
each, the tree before and after the group commit's syncfs of many logs, back to back): acks=all
2.88 and 2.20 s before, 1.55 and 1.51 s after; acks=1 0.86-0.90 s in both runs.

(before: 5,012 descriptors per worker at 2,000 partitions; Metadata of all 10,000 took 133-207
ms under load before its answers were cached per topic).

A worker restarted after kill -9 reached 338-341 MB RSS at 10,000 partitions (110 MB at 2,000),
against 82-90 MB before its kill. Why (2026-11-28, 2,000 partitions, worker 0 before and after
its kill -9 and restart): /proc/<pid>/status RssAnon 39 -> 40 MB, RssShmem 15 -> 15, RssFile
4 -> 55 MB; /proc/<pid>/smaps by mapping: .timeindex 0 -> 27 MB, .index 0 -> 23 MB. The pages
of the index and time index mappings, faulted in while the restart recovered (or attached)
every partition's active segment: page cache, not heap, but counted in RSS and growing with
the partitions. Since 2026-11-30 recovery and attach let go of them (MADV_DONTNEED,
`LogSegment.drop_index_pages`): 87-90 MB after the kill -9 and restart, in runs of the same
hour (10,000 partitions, 3 rounds; kill -9 to serving 3.12 s before, 3.09 s after).

Run: .venv/bin/python perf/bench_many_partitions.py [--sizes 2000,10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from klog.admin import Admin  # noqa: E402
from klog.protocol.apis import metadata  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

PER_TOPIC = 500


def worker_figures(appliance) -> list[tuple[int, float, int]]:
    """(descriptors, RSS MB, memory mappings) per worker."""
    out = []
    for _, pid in sorted(appliance.pids().items()):
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
        with open(f"/proc/{pid}/maps") as f:
            maps = sum(1 for _ in f)
        out.append((fds, rss, maps))
    return out


def metadata_ms(appliance, rounds: int) -> tuple[float, int]:
    """Median time from sending Metadata (all topics, v8) to the last byte of the answer, on
    one warm connection; the answer is decoded once, outside the timing, to count partitions
    (decoding 10,000 partitions in Python would time this client, not the broker)."""
    client = RawClient(appliance.port, timeout_s=60)
    fields = dict(topics=None, allow_auto_topic_creation=False,
                  include_cluster_authorized_operations=False,
                  include_topic_authorized_operations=False)
    try:
        answer = client.call(metadata, 8, **fields)
        partitions = sum(len(t.partitions) for t in answer.topics)
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            client.send(metadata, 8, **fields)
            _read_frame(client.sock)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times), partitions
    finally:
        client.close()


def _read_frame(sock) -> int:
    head = b""
    while len(head) < 4:
        head += sock.recv(4 - len(head))
    left = int.from_bytes(head, "big")
    size = left
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        left -= len(chunk)
    return size


def wide_produce_s(appliance, size: int, acks: str) -> float:
    """A librdkafka producer at its defaults but `acks`: one 100-byte message to each
    partition, until every one is acknowledged (s). With acks=all each partition's log is
    made durable before its answer (group_commit.py): the many logs of one round share one
    syncfs of their filesystem; with acks=1 nothing waits for the disk."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": appliance.bootstrap, "acks": acks})
    producer.list_topics(timeout=60)  # its metadata in hand before the clock starts
    t = time.perf_counter()
    for i in range(size):
        producer.produce(f"many-{i // PER_TOPIC}", b"x" * 100, partition=i % PER_TOPIC)
        producer.poll(0)
    assert producer.flush(300) == 0
    return time.perf_counter() - t


def kill_worker_to_serving(appliance, index: int = 0) -> float:
    old = appliance.worker_pid(index)
    t = time.perf_counter()
    os.kill(old, signal.SIGKILL)
    deadline = t + 300
    while time.perf_counter() < deadline:
        pids = appliance.pids()
        if pids.get(index, 0) not in (0, old) and appliance._all_serving():
            return time.perf_counter() - t
        time.sleep(0.02)
    raise RuntimeError("the worker did not come back")


def run(size: int, rounds: int, nofile: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-many-") as tmp:
        appliance = Appliance(Path(tmp), log_dirs=2, settings={"log.segment.bytes": 65536,
                                                 "log.index.size.max.bytes": 65536},
                              command_prefix=("prlimit", f"--nofile={nofile}:{nofile}"))
        appliance.start(timeout_s=120)
        try:
            t = time.perf_counter()
            with Admin(appliance.bootstrap) as admin:
                for i in range(size // PER_TOPIC):
                    admin.create_topic(f"many-{i}", PER_TOPIC)
            created_s = time.perf_counter() - t
            md_ms, seen = metadata_ms(appliance, rounds)
            assert seen == size, (seen, size)
            wide = {acks: [] for acks in ("all", "1")}
            for _ in range(2):  # alternating: the machine's load drifts
                for acks in wide:
                    wide[acks].append(wide_produce_s(appliance, size, acks))
            idle = worker_figures(appliance)
            appliance.stop()
            t = time.perf_counter()
            appliance.start(timeout_s=300)
            restart_s = time.perf_counter() - t
            md_after, _ = metadata_ms(appliance, rounds)
            kill_s = kill_worker_to_serving(appliance)
            after_kill = worker_figures(appliance)
        except Exception:
            print(appliance.log_text()[-4000:], file=sys.stderr)
            raise
        finally:
            appliance.stop()
    return dict(size=size, created_s=created_s, metadata_ms=md_ms, metadata_after_ms=md_after,
                restart_s=restart_s, kill_s=kill_s, idle=idle, after_kill=after_kill,
                wide=wide)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nofile", type=int,
                        default=resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    args = parser.parse_args()
    results = [run(int(s), args.rounds, args.nofile) for s in args.sizes.split(",")]
    print(f"one appliance, 2 workers, 64 KiB segments, RLIMIT_NOFILE {args.nofile}, "
          f"Metadata median of {args.rounds}")
    print(f"{'partitions':>10} {'create s':>9} {'metadata ms':>12} {'(restarted)':>11} "
          f"{'restart s':>10} {'kill -9 s':>10}  per worker idle: fds / RSS MB / maps")
    for r in results:
        workers = "  ".join(f"{f} / {m:.0f} / {n}" for f, m, n in r["idle"])
        print(f"{r['size']:>10} {r['created_s']:>9.2f} {r['metadata_ms']:>12.1f} "
              f"{r['metadata_after_ms']:>11.1f} {r['restart_s']:>10.2f} {r['kill_s']:>10.2f}  "
              f"{workers}")
        workers = "  ".join(f"{f} / {m:.0f} / {n}" for f, m, n in r["after_kill"])
        print(f"{'':>10} after the kill -9 and restart of worker 0: {workers}")
        print(f"{'':>10} one message to each partition, librdkafka at its defaults (s, two "
              f"rounds): acks=all " + ", ".join(f"{x:.2f}" for x in r["wide"]["all"])
              + "; acks=1 " + ", ".join(f"{x:.2f}" for x in r["wide"]["1"]))


if __name__ == "__main__":
    main()
