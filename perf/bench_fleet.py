"""Cluster-mode benchmark (issue 11), on one host, each figure beside its baseline of the run.

- Topic creation until every node's Metadata shows all its leaders (ms), through a fleet of
  three appliances; baseline: the same on one appliance running alone (no ZooKeeper).
- Controller failover: kill -9 of the controller's supervisor until another appliance holds
  /controller with a higher epoch (s); the session timeout is the floor it cannot beat.
- Produce throughput with confluent-kafka at its defaults (200-byte messages, 12 partitions):
  three appliances vs one appliance alone. All of them share this host's two cores, so the
  fleet cannot be faster here: the figure shows what coordination costs, not scaling.

Run: .venv/bin/python perf/bench_fleet.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

from tests.conftest import Appliance  # noqa: E402
from tests.fleet.zookeeper import Ensemble  # noqa: E402

SESSION_MS = 6000


def start_fleet(root: Path, connect: str, count: int) -> list[Appliance]:
    fleet = []
    for broker_id in range(1, count + 1):
        settings = {"broker.id": str(broker_id), "zookeeper.session.timeout.ms": str(SESSION_MS)}
        if connect:
            settings["zookeeper.connect"] = connect
        fleet.append(Appliance(root / f"a{broker_id}", log_dirs=2, settings=settings)
                     .start(timeout_s=60))
    return fleet


def creation_ms(appliances: list[Appliance], name: str, partitions: int = 12) -> float:
    nodes = [f"127.0.0.1:{a.port + i}" for a in appliances for i in range(2)]
    admins = [AdminClient({"bootstrap.servers": n}) for n in nodes]
    start = time.perf_counter()
    admins[0].create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    pending = set(range(len(admins)))
    while pending:
        for i in list(pending):
            topic = admins[i].list_topics(name, timeout=10).topics.get(name)
            if topic and len(topic.partitions) == partitions and all(
                    p.leader >= 0 for p in topic.partitions.values()):
                pending.discard(i)
    return (time.perf_counter() - start) * 1000


def produce_rate(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap})
    value = b"x" * 200
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return count / (time.perf_counter() - start)


def failover_s(ensemble: Ensemble, fleet: list[Appliance]) -> float:
    zk = KazooClient(hosts=f"{ensemble.connect}/klog-bench")
    zk.start(timeout=10)
    try:
        controller = orjson.loads(zk.get("/controller")[0])["brokerid"]
        epoch = int(zk.get("/controller_epoch")[0])
        fleet[controller - 1].kill()
        start = time.perf_counter()
        while True:
            try:
                now = orjson.loads(zk.get("/controller")[0])["brokerid"]
                if now != controller and int(zk.get("/controller_epoch")[0]) > epoch:
                    return time.perf_counter() - start
            except Exception:  # noqa: BLE001 - no controller yet
                pass
            time.sleep(0.05)
    finally:
        zk.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, messages = (3, 100_000) if args.quick else (10, 500_000)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        alone = start_fleet(root / "alone", "", 1)
        ensemble = Ensemble(root / "zk").start()
        fleet = []
        try:
            fleet = start_fleet(root / "fleet", f"{ensemble.connect}/klog-bench", 3)
            time.sleep(2)
            solo = [creation_ms(alone, f"solo-{i}") for i in range(rounds)]
            many = [creation_ms(fleet, f"fleet-{i}") for i in range(rounds)]
            print(f"topic creation, 12 partitions, until every node shows every leader: "
                  f"fleet of 3 median {statistics.median(many):.0f} ms (max {max(many):.0f}) | "
                  f"baseline one appliance alone median {statistics.median(solo):.0f} ms")
            rate_alone = produce_rate(alone[0].bootstrap, "solo-0", messages)
            rate_fleet = produce_rate(fleet[0].bootstrap, "fleet-0", messages)
            print(f"produce, confluent-kafka defaults, 200 B: fleet of 3 {rate_fleet:,.0f} msg/s"
                  f" | baseline one appliance alone {rate_alone:,.0f} msg/s "
                  f"(ratio {rate_fleet / rate_alone:.2f}; all on this 2-core host)")
            took = failover_s(ensemble, fleet)
            print(f"controller failover after kill -9: {took:.1f} s "
                  f"(floor: the session timeout, {SESSION_MS / 1000:.0f} s)")
        finally:
            for appliance in alone + fleet:
                appliance.stop()
            ensemble.close()


if __name__ == "__main__":
    main()
