"""Many replicated partitions on a fleet (issue 26): three appliances of two workers each on a
real three-server ZooKeeper ensemble, topics of 500 partitions (`--per-topic`: one topic of
10,000 is the hardest case for the control plane, whose messages are per topic), replication
factor 3.

For each size: creation time (one CreateTopics per topic), the time until Metadata shows every
partition led, Metadata of all (median of rounds, one warm connection), descriptors, RSS and
mappings per worker (idle), each worker's CPU over 10 s idle, then the controller's kill -9
(supervisor and workers): the time until every partition is led by a live node, both in
ZooKeeper's state znodes (the last one written, by its mtime, read after) and in the Metadata
every surviving appliance answers (polled every 0.25 s), stated beside the session timeout;
then the killed appliance's start to serving. The measuring process shares the machine's
cores: it reads gently.

Run: .venv/bin/python perf/bench_fleet_partitions.py [--sizes 1000,10000] [--rounds 5]
     [--per-topic 10000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from klog.admin import Admin  # noqa: E402
from perf.bench_many_partitions import metadata_ms, worker_figures  # noqa: E402
from tests.fleet.harness import (  # noqa: E402
    SESSION_MS,
    controller_and_epoch,
    fleet_appliance,
    kill_appliance,
    wait_for_brokers,
    zk_client,
)
from tests.fleet.zookeeper import Ensemble  # noqa: E402

PER_TOPIC = 500
SETTINGS = {"log.segment.bytes": "65536", "log.index.size.max.bytes": "65536"}


def metadata_leaders(bootstrap: str) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader, as one appliance's Metadata answers."""
    from klog.protocol.apis import metadata
    from tests.worker.raw import RawClient
    client = RawClient(int(bootstrap.rsplit(":", 1)[1]), timeout_s=60)
    try:
        answer = client.call(metadata, 8, topics=None, allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)
    finally:
        client.close()
    return {(t.name, p.partition_index): p.leader_id for t in answer.topics
            for p in t.partitions}


def zk_leaders(zk, topics: list[str],
               per_topic: int = PER_TOPIC) -> dict[tuple[str, int], tuple[int, float]]:
    """(topic, partition) -> (leader, when its state znode was last written, epoch seconds by
    ZooKeeper's clock: the same machine's) from the state znodes, read with pipelined gets."""
    import orjson
    wanted = [(t, p) for t in topics for p in range(per_topic)]
    out = {}
    for start in range(0, len(wanted), 1000):
        chunk = wanted[start:start + 1000]
        asyncs = [zk.get_async(f"/brokers/topics/{t}/partitions/{p}/state") for t, p in chunk]
        for key, result in zip(chunk, asyncs):
            try:
                data, stat = result.get(timeout=30)
                out[key] = (orjson.loads(data)["leader"], stat.mtime / 1000)
            except Exception:  # noqa: BLE001 - not written yet
                out[key] = (-1, 0.0)
    return out


IDLE_SAMPLE_S = 10.0


def idle_cpu_percent(fleet, seconds: float) -> list[float]:
    """Each worker's CPU (user + system, % of one core) over `seconds` with nothing written:
    what replication costs idle (followers fetching, leaders answering)."""
    def ticks(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    pids = [pid for a in fleet for _, pid in sorted(a.pids().items())]
    before = {pid: ticks(pid) for pid in pids}
    time.sleep(seconds)
    hz = os.sysconf("SC_CLK_TCK")
    return [(ticks(pid) - before[pid]) / hz / seconds * 100 for pid in pids]


def all_led(leaders: dict, size: int, dead: set[int]) -> bool:
    return len(leaders) == size and all(node >= 0 and node // 100 not in dead
                                        for node in leaders.values())


def wait_led(read, size: int, dead: set[int], timeout_s: float,
             interval_s: float = 0.05) -> float:
    """Seconds until `read()` shows every partition led by a live appliance's node."""
    t = time.perf_counter()
    while time.perf_counter() - t < timeout_s:
        try:
            if all_led(read(), size, dead):
                return time.perf_counter() - t
        except Exception:  # noqa: BLE001 - an appliance still starting
            pass
        time.sleep(interval_s)
    raise RuntimeError(f"not every partition led after {timeout_s} s")


def run(size: int, rounds: int, nofile: int, settings: dict[str, str],
        logs: str | None = None, per_topic: int = PER_TOPIC) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-many-",
                                     ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        ensemble = Ensemble(root / "zk").start()
        fleet = [fleet_appliance(ensemble, root, "/many", b, settings=settings)
                 for b in (1, 2, 3)]
        for appliance in fleet:
            appliance.command_prefix = ("prlimit", f"--nofile={nofile}:{nofile}")
        zk = None
        try:
            for appliance in fleet:
                appliance.start(timeout_s=120)
            wait_for_brokers(fleet[0], 6, 60)
            zk = zk_client(ensemble, "/many")
            topics = [f"many-{i}" for i in range(size // per_topic)]
            t = time.perf_counter()
            with Admin(fleet[0].bootstrap, request_timeout_ms=120_000) as admin:
                for name in topics:
                    admin.create_topic(name, per_topic, replication_factor=3)
            created_s = time.perf_counter() - t
            led_s = created_s + wait_led(lambda: metadata_leaders(fleet[0].bootstrap), size,
                                         set(), 600)
            md_ms, seen = metadata_ms(fleet[0], rounds)
            assert seen == size, (seen, size)
            idle = [worker_figures(a) for a in fleet]
            idle_cpu = idle_cpu_percent(fleet, IDLE_SAMPLE_S)
            controller = controller_and_epoch(zk)[0]
            victim = fleet[controller - 1]
            dead = {controller}
            t = time.perf_counter()
            killed_at = time.time()
            print(f"kill -9 of appliance {controller} at {killed_at:.3f}", flush=True)
            kill_appliance(victim)
            # polled gently: a Metadata of 10,000 partitions is work for the appliance, and
            # this process shares the machine's cores with the fleet it measures
            # each survivor on a thread of its own, at the same time: polled one after the
            # other, the second's figure was never below the first's
            def led_at(survivor) -> float:
                wait_led(lambda: metadata_leaders(survivor.bootstrap), size, dead, 600,
                         interval_s=0.25)
                return time.perf_counter() - t
            survivors = [a for a in fleet if a is not victim]
            with concurrent.futures.ThreadPoolExecutor(len(survivors)) as pool:
                survivors_s = list(pool.map(led_at, survivors))
            md_s = max(survivors_s)  # every survivor's Metadata
            # ZooKeeper's side read once, after: each state znode's last write time (polling
            # 10,000 znodes in a loop would load the ensemble and the cores it measures)
            states = zk_leaders(zk, topics, per_topic)
            assert all_led({k: v[0] for k, v in states.items()}, size, dead)
            zk_s = max(at for _, at in states.values()) - killed_at
            new_controller = controller_and_epoch(zk)[0]
            t = time.perf_counter()
            victim.start(timeout_s=600)
            restart_s = time.perf_counter() - t
            after = worker_figures(victim)
            result = dict(size=size, created_s=created_s, led_s=led_s, metadata_ms=md_ms,
                          idle=idle, controller=controller, new_controller=new_controller,
                          zk_s=zk_s, md_s=md_s, survivors_s=survivors_s, restart_s=restart_s,
                          after=after, idle_cpu=idle_cpu)
            report(result)  # before the stop and clean-up, which may take long
        except Exception:
            for appliance in fleet:
                print(appliance.log_text()[-3000:], file=sys.stderr)
            raise
        finally:
            if zk is not None:
                zk.stop()
            for appliance in fleet:
                appliance.stop()
            if logs is not None:  # the appliances' logs, kept for reading the timeline
                Path(logs).mkdir(parents=True, exist_ok=True)
                for i, appliance in enumerate(fleet, 1):
                    shutil.copy(appliance.stderr_path, Path(logs) / f"fleet-{size}-a{i}.log")
            ensemble.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fetch-wait-ms", type=int, default=None,
                        help="replica.fetch.wait.max.ms (default: the appliance's, 500)")
    parser.add_argument("--logs", help="a directory to keep the appliances' logs in")
    parser.add_argument("--per-topic", type=int, default=PER_TOPIC,
                        help=f"partitions per topic (default {PER_TOPIC}; one topic of all: "
                             f"the size)")
    parser.add_argument("--nofile", type=int,
                        default=resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    args = parser.parse_args()
    print(f"fleet of 3 appliances x 2 workers, replication factor 3, 64 KiB segments, "
          f"topics of {args.per_topic} partitions, session timeout {SESSION_MS} ms, "
          f"RLIMIT_NOFILE {args.nofile}", flush=True)
    print(f"{'partitions':>10} {'create s':>9} {'all led s':>9} {'metadata ms':>12} "
          f"{'kill->zk led s':>14} {'->metadata s':>12} {'beyond session s':>16} "
          f"{'restart s':>9}", flush=True)
    settings = dict(SETTINGS)
    if args.fetch_wait_ms is not None:
        settings["replica.fetch.wait.max.ms"] = str(args.fetch_wait_ms)
        print(f"replica.fetch.wait.max.ms={args.fetch_wait_ms}", flush=True)
    for s in args.sizes.split(","):
        run(int(s), args.rounds, args.nofile, settings, args.logs,
            min(args.per_topic, int(s)))


def report(r: dict) -> None:
    print(f"{r['size']:>10} {r['created_s']:>9.2f} {r['led_s']:>9.2f} "
          f"{r['metadata_ms']:>12.1f} {r['zk_s']:>14.2f} {r['md_s']:>12.2f} "
          f"{r['md_s'] - SESSION_MS / 1000:>16.2f} {r['restart_s']:>9.2f}", flush=True)
    print(f"{'':>10} idle CPU per worker over {IDLE_SAMPLE_S:.0f} s (% of a core): " + "  ".join(
        f"{c:.0f}" for c in r["idle_cpu"]), flush=True)
    print(f"{'':>10} each survivor's Metadata all led after (s from the kill): " + "  ".join(
        f"{x:.2f}" for x in r["survivors_s"]), flush=True)
    print(f"{'':>10} controller {r['controller']} killed, {r['new_controller']} took over;"
          f" per worker idle (fds / RSS MB / maps): " + "; ".join(
              "  ".join(f"{f}/{m:.0f}/{n}" for f, m, n in a) for a in r["idle"]),
          flush=True)
    print(f"{'':>10} the killed appliance restarted: " + "  ".join(
        f"{f}/{m:.0f}/{n}" for f, m, n in r["after"]), flush=True)

if __name__ == "__main__":
    main()
