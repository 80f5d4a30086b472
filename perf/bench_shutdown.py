"""Controlled shutdown vs kill -9 (issue 12), on one host, beside a baseline of the same run.

Three appliances (two workers each) and a three-server ZooKeeper on this host; a topic of 6
partitions, replication factor 3, min.insync.replicas=2; one idempotent acks=all
confluent-kafka producer writing 200 messages/s throughout (linger.ms=5). In turn, the
appliance leading partition 0 gets:
- SIGTERM (controlled shutdown: leadership moves away first): time from the signal until the
  supervisor exited, and the producer's worst delivery latency for messages sent from just
  before the signal until 5 s after the exit;
- kill -9 (supervisor and workers): the same worst latency, over the same kind of window
  (the fleet notices after the ZooKeeper session timeout, 6 s here).
Each stop is followed by a restart and the automatic preferred-leader rebalance (interval
2 s), so every round starts from the same leadership. The baseline is the worst latency of a
quiet window of the same producer before any stop. Delivery errors are counted (expected: 0).

Run: .venv/bin/python perf/bench_shutdown.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.fleet.harness import (  # noqa: E402
    SESSION_MS,
    kill_appliance,
    led,
    running_fleet,
    wait_until,
    zk_client,
)
from tests.fleet.zookeeper import Ensemble  # noqa: E402

CHROOT = "/klog-bench-shutdown"
TOPIC = "bench"
PARTITIONS = 6
AFTER_EXIT_S = 5.0
BURST, TICK_S = 10, 0.05  # 200 messages/s: well below what the fleet takes on this host


class TimedWriter:
    """A steady producer that keeps (sent at, latency s, error) for every message."""

    def __init__(self, bootstrap: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000,
                                  "retry.backoff.ms": 100, "log_level": 0})
        self.samples: list[tuple[float, float, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sent = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            for _ in range(BURST):
                now = time.monotonic()
                try:
                    self.producer.produce(TOPIC, b"x" * 200, partition=sent % PARTITIONS,
                                          on_delivery=lambda err, msg, t=now: self.samples.append(
                                              (t, time.monotonic() - t, err)))
                    sent += 1
                except BufferError:
                    self.producer.poll(0.05)
            next_at += TICK_S
            while (left := next_at - time.monotonic()) > 0:
                self.producer.poll(left)
        self.producer.flush(120)

    def start(self) -> TimedWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)

    def window(self, start: float, end: float) -> tuple[float, int, int]:
        """(worst latency s, messages, errors) of the messages sent in [start, end)."""
        chosen = [(lat, err) for t, lat, err in list(self.samples) if start <= t < end]
        return (max((lat for lat, _ in chosen), default=0.0), len(chosen),
                sum(1 for _, err in chosen if err is not None))


def leader_appliance(zk) -> int:
    data, _ = zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")
    return orjson.loads(data)["leader"] // 100


def settled(zk) -> bool:
    """Every ISR whole and every partition led by its preferred replica."""
    data, _ = zk.get(f"/brokers/topics/{TOPIC}")
    assignment = orjson.loads(data)["partitions"]
    for p in range(PARTITIONS):
        state = orjson.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/{p}/state")[0])
        if len(state["isr"]) != 3 or state["leader"] != assignment[str(p)][0]:
            return False
    return True


def wait_for_acks(writer: TimedWriter, after: float, count: int = 200) -> None:
    wait_until(lambda: sum(1 for t, _, err in list(writer.samples) if t >= after
                           and err is None) >= count, 120, "acknowledgements after the stop")


def sigterm_round(fleet, zk, writer: TimedWriter) -> tuple[float, float, int]:
    victim = fleet[leader_appliance(zk) - 1]
    signalled = time.monotonic()
    assert victim.stop(timeout_s=60) == 0
    exited = time.monotonic()
    time.sleep(AFTER_EXIT_S)
    wait_for_acks(writer, exited)
    worst, _, errors = writer.window(signalled - 0.5, exited + AFTER_EXIT_S)
    victim.start(timeout_s=60)
    wait_until(lambda: settled(zk), 120, "ISRs whole, preferred leaders back")
    return exited - signalled, worst, errors


def kill_round(fleet, zk, writer: TimedWriter) -> tuple[float, int]:
    victim = fleet[leader_appliance(zk) - 1]
    killed = time.monotonic()
    kill_appliance(victim)
    time.sleep(SESSION_MS / 1000 + AFTER_EXIT_S)
    wait_for_acks(writer, killed + SESSION_MS / 1000)
    worst, _, errors = writer.window(killed - 0.5, killed + SESSION_MS / 1000 + AFTER_EXIT_S)
    victim.start(timeout_s=60)
    wait_until(lambda: settled(zk), 120, "ISRs whole, preferred leaders back")
    return worst, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 1 if args.quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        ensemble = Ensemble(Path(tmp) / "zk")
        ensemble.start()
        try:
            with running_fleet(ensemble, Path(tmp), CHROOT, settings={
                    "leader.imbalance.check.interval.seconds": "2"}) as fleet:
                admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={
                    "min.insync.replicas": "2"})])[TOPIC].result(30)
                wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 60, "leaders")
                zk = zk_client(ensemble, CHROOT)
                wait_until(lambda: settled(zk), 60, "whole ISRs")
                writer = TimedWriter(",".join(a.bootstrap for a in fleet)).start()
                time.sleep(2)
                quiet = time.monotonic()
                time.sleep(AFTER_EXIT_S + 1)
                base, base_count, base_errors = writer.window(quiet, quiet + AFTER_EXIT_S + 1)
                terms = [sigterm_round(fleet, zk, writer) for _ in range(rounds)]
                kills = [kill_round(fleet, zk, writer) for _ in range(rounds)]
                writer.stop()
                zk.stop()
        finally:
            ensemble.close()
    print(f"baseline, no stop: worst delivery latency {base * 1000:.0f} ms over "
          f"{base_count} messages ({base_errors} errors)")
    exits = [t for t, _, _ in terms]
    print(f"SIGTERM of partition 0's leader appliance (controlled shutdown), {rounds} round(s): "
          f"signal to exit median {statistics.median(exits):.2f} s, max {max(exits):.2f} s; "
          f"worst delivery latency {max(w for _, w, _ in terms) * 1000:.0f} ms; "
          f"delivery errors {sum(e for _, _, e in terms)}")
    print(f"kill -9 of partition 0's leader appliance, {rounds} round(s): worst delivery "
          f"latency {max(w for w, _ in kills) * 1000:.0f} ms (median of rounds "
          f"{statistics.median(w for w, _ in kills) * 1000:.0f} ms; session timeout "
          f"{SESSION_MS} ms); delivery errors {sum(e for _, e in kills)}")


if __name__ == "__main__":
    main()
