"""What klog costs while nobody uses it: CPU of idle processes, as a share of one core.

On a 2-core host every idle wake-up of every worker is taken from the busy ones: a fleet
of three appliances of two workers each is six workers, and a benchmark of one follower or
one producer on this host shares its two cores with all of them. Measured over `--seconds`
after the fleet has settled (topics created, every partition led):

- one appliance of two workers, with no partitions and with `--partitions` of them, then with
  a librdkafka consumer group of all of them polling (nothing to read): a consumer's fetch
  has no session, so each names every partition of its worker, twice a second;
- a fleet of three (a private three-server ZooKeeper) with a topic of 12 partitions
  replicated three times (each follower's fetch waits `replica.fetch.wait.max.ms` at its
  leader: an idle follower still asks twice a second).

Per process: the supervisor ("sup") and each worker ("w0", "w1"), from /proc. Before
34b4ea7 every worker polled other workers' high watermarks every 2 ms whether or not any
fetch waited: 7.8% of a core per idle worker, 45% of a core for the idle fleet.

Measured 2026-11-30 with `--partitions 10000 --no-fleet`, each time the tree before a change in
a worktree beside the tree after it: librdkafka's idle consumer cost the appliance 54.9 % of a
core before the lazy struct defaults and the single read of an unwoken long poll, 26.3 % after;
klog's 167.2 % before the cheaper watch of other workers' partitions, 40.6 % after (librdkafka's
24.5 and 24.4 % in those two runs).

Run: .venv/bin/python perf/bench_idle.py [--seconds 10] [--partitions 4000] [--no-fleet]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "perf"))

import klog  # noqa: E402
from tests.conftest import Appliance  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def processes(appliance: Appliance, prefix: str = "") -> dict[str, int]:
    named = {f"{prefix}sup": appliance.process.pid}
    named.update({f"{prefix}w{index}": pid for index, pid in appliance.pids().items()})
    return named


def idle_shares(named: dict[str, int], seconds: float) -> dict[str, float]:
    """% of one core each process used over `seconds` of idleness."""
    before = {name: cpu_s(pid) for name, pid in named.items()}
    start = time.monotonic()
    time.sleep(seconds)  # the measurement itself: the processes are left alone meanwhile
    took = time.monotonic() - start
    return {name: 100 * (cpu_s(pid) - before[name]) / took for name, pid in named.items()}


def show(title: str, shares: dict[str, float]) -> None:
    each = ", ".join(f"{name} {share:.1f}" for name, share in shares.items())
    print(f"{title}: {sum(shares.values()):.1f}% of a core in all ({each})", flush=True)


def appliance_rows(seconds: float, partitions: int) -> None:
    for count in (0, partitions):
        with tempfile.TemporaryDirectory() as tmp:
            appliance = Appliance(Path(tmp), log_dirs=2, settings={
                "log.segment.bytes": str(1 << 20), "log.index.size.max.bytes": "65536"})
            appliance.start()
            try:
                with klog.Admin(appliance.bootstrap) as admin:
                    for i in range(0, count, 500):
                        admin.create_topic(f"idle-{i}", min(500, count - i))
                time.sleep(3)  # past the creations' own work (logs opened, shm published)
                show(f"one appliance, 2 workers, {count:,} partitions, idle",
                     idle_shares(processes(appliance), seconds))
                if count:
                    with polling_consumer(appliance.bootstrap, count):
                        show(f"the same, a librdkafka consumer group of all {count:,} "
                             f"polling at its defaults (nothing to read)",
                             idle_shares(processes(appliance), seconds))
                    with polling_klog_consumer(appliance.bootstrap, count):
                        show(f"the same, klog's consumer group of all {count:,} polling at "
                             f"its defaults (nothing to read)",
                             idle_shares(processes(appliance), seconds))
            finally:
                appliance.stop()


def polling_klog_consumer(bootstrap: str, count: int):
    """klog's own Consumer (its defaults) in a group of every `idle-*` partition, polling on
    a thread of its own. It spreads its reads over the appliance's workers, so each worker
    serves, and watches for appends, partitions of the other (worker.py)."""
    consumer = klog.Consumer(bootstrap_servers=bootstrap, group_id="idle-klog-consumer",
                             auto_offset_reset="latest")
    consumer.subscribe(pattern="^idle-.*")
    return polling(consumer, lambda: consumer.poll(timeout_ms=200), count)


def polling_consumer(bootstrap: str, count: int):
    """A confluent-kafka consumer (its defaults) assigned every `idle-*` partition, polling
    on a thread of its own: it fetches every partition of each worker in one Fetch, twice a
    second (fetch.wait.max.ms 500), as a consumer of a big topic does between messages."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-consumer",
                         "auto.offset.reset": "latest"})
    consumer.subscribe(["^idle-.*"])
    return polling(consumer, lambda: consumer.poll(0.2), count)


@contextlib.contextmanager
def polling(consumer, poll, count: int):
    """`consumer` polled until it holds `count` partitions, then on a thread of its own
    while the caller measures; closed after."""
    try:
        deadline = time.monotonic() + 120
        while len(consumer.assignment()) < count and time.monotonic() < deadline:
            poll()
        assert len(consumer.assignment()) == count, len(consumer.assignment())
        stop = threading.Event()
        thread = threading.Thread(target=lambda: [poll() for _ in iter(stop.is_set, True)])
        thread.start()
        try:
            time.sleep(3)  # its offsets looked up, its fetches going
            yield
        finally:
            stop.set()
            thread.join()
    finally:
        consumer.close()


def fleet_row(seconds: float) -> None:
    from bench_replication import running_fleet
    from confluent_kafka.admin import NewTopic

    with tempfile.TemporaryDirectory() as tmp, running_fleet(
            Path(tmp), [NewTopic("idle", 12, 3)]) as (_, fleet):
        time.sleep(3)
        named = {}
        for number, appliance in enumerate(fleet, 1):
            named.update(processes(appliance, f"a{number}."))
        show("fleet of three, 12 partitions x 3 replicas, idle (ZooKeeper not counted)",
             idle_shares(named, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--no-fleet", action="store_true")
    args = parser.parse_args()
    appliance_rows(args.seconds, args.partitions)
    if not args.no_fleet:
        fleet_row(args.seconds)


if __name__ == "__main__":
    main()
