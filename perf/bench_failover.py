"""kill -9 of a leader's appliance → the producer's next acknowledgement, on a fleet of three.

Issue 26's failover row: the time a client loses to a leader's death beyond the ZooKeeper
session timeout (which no broker can shorten). Each kill is timed along its way so the cost
shows where it lies, all on this machine's wall clock:

- `expiry`: the dead appliance's /brokers/ids node goes (a kazoo watch);
- `election`: the controller's write of the partition's new state (the znode's mtime);
- `worker`: the new leader's worker answers Metadata with itself as the leader (polled);
- `client`: librdkafka's metadata debug log first names the new leader;
- `ack`: the producer's first acknowledgement after the kill.

A producer (idempotent, acks=all) writes one message every 5 ms to a one-partition topic of
replication factor 3; the leader's appliance is killed, then started again and given its
place back in the ISR before the next kill. With `--baseline DIR` the same run is made first
on the code checked out in DIR (e.g. /work/main), so both figures come from one run.

    python perf/bench_failover.py --kills 20 [--baseline /work/main] [--client k=v ...]
                                  [--producer klog] [--grace-ms 0]

What is left after the election is librdkafka's own: while a partition has no live leader
it asks Metadata on a fixed timer ("refresh unavailable topics", every `retry.backoff.max.ms`,
1 s by default), so it learns the new leader 0-1 s after the election (and ZooKeeper expires a
session up to a tick after its timeout). KIP-951's hints cannot help there: no live broker is
asked to produce to the partition meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import tests.conftest as appliance_module  # noqa: E402
from klog.protocol.apis import metadata as metadata_api  # noqa: E402
from tests.fleet.harness import (  # noqa: E402
    SESSION_MS,
    FleetSpec,
    kill_appliance,
    partition_state,
    running_fleet,
    zk_client,
)
from tests.fleet.zookeeper import Ensemble  # noqa: E402
from tests.polling import wait_until  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

TOPIC = "failover-bench"
LEADER_LINE = re.compile(rf"{TOPIC} \[?partition \[?0\]? Leader (\d+)|{TOPIC} \[0\].*leader (\d+)",
                         re.IGNORECASE)

TRACE = open(os.environ["BENCH_FAILOVER_TRACE"], "w") if os.environ.get(  # noqa: SIM115
    "BENCH_FAILOVER_TRACE") else None


class TimedProducer:
    """acks=all, idempotent, one message per 5 ms; keeps each acknowledgement's time and the
    time librdkafka's metadata log first names each leader."""

    def __init__(self, bootstrap: str, extra: dict[str, str]):
        self.acks: list[float] = []
        self.leader_seen: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "message.timeout.ms": 120_000,
            "debug": os.environ.get("BENCH_FAILOVER_DEBUG", "metadata"),
            "logger": self, **extra})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    # librdkafka calls `log` on its own threads (the `logger` protocol of logging.Logger)
    def log(self, level, fmt, *args) -> None:
        line = fmt % args if args else fmt
        if TRACE is not None:
            TRACE.write(f"{time.time():.3f} {line}\n")
        found = LEADER_LINE.search(line)
        if found:
            with self._lock:
                self.leader_seen.append((time.time(), int(found.group(1) or found.group(2))))

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acks.append(time.time())

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(BufferError):
                self.producer.produce(TOPIC, b"x" * 100, partition=0,
                                      on_delivery=self._delivered)
            self.producer.poll(0.005)
        self.producer.flush(30)

    def first_ack_after(self, t: float) -> float | None:
        return next((a for a in list(self.acks) if a > t), None)

    def first_seen(self, leader: int, after: float) -> float | None:
        with self._lock:
            return next((t for t, n in self.leader_seen if n == leader and t > after), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class KlogTimedProducer:
    """klog's own producer in the same role, at its defaults (acks=all, idempotent): one
    `send()` at a time, each waited for, then 5 ms; keeps each acknowledgement's time. It
    follows KIP-951's hints and its own Metadata, so no log names a leader (`client`: nan)."""

    def __init__(self, bootstrap: str, extra: dict[str, str]):
        from klog import Producer as KlogProducer
        self.acks: list[float] = []
        self.producer = KlogProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0,
                                     **{k: int(v) if v.isdigit() else v
                                        for k, v in extra.items()})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.send(TOPIC, b"x" * 100, partition=0).result(120)
                self.acks.append(time.time())
            except Exception as exc:  # noqa: BLE001 - counted as a gap, as librdkafka's
                print(f"klog producer: {exc!r}", file=sys.stderr)
            time.sleep(0.005)

    def first_ack_after(self, t: float) -> float | None:
        return next((a for a in list(self.acks) if a > t), None)

    def first_seen(self, leader: int, after: float) -> float | None:
        return None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        self.producer.close()


def metadata_leader(port: int) -> int:
    try:
        client = RawClient(port, timeout_s=1)
    except OSError:
        return -2
    try:
        answer = client.call(metadata_api, 8, topics=[metadata_api.MetadataRequestTopic(
            name=TOPIC)], allow_auto_topic_creation=False)
        return answer.topics[0].partitions[0].leader_id
    except (OSError, ConnectionError, IndexError):
        return -2
    finally:
        client.close()


def one_kill(fleet, zk, producer: TimedProducer) -> dict[str, float]:
    state = partition_state(zk, TOPIC, 0)
    victim_id = state["leader"] // 100
    victim = fleet[victim_id - 1]
    expired = threading.Event()
    times: dict[str, float] = {}

    def gone(event) -> None:
        if event is not None and event.type == "DELETED":
            times["expiry"] = time.time()
            expired.set()

    zk.exists(f"/brokers/ids/{state['leader']}", watch=gone)
    wait_until(lambda: producer.first_ack_after(time.time() - 0.05), 30, "a steady producer",
               interval_s=0.02)
    kill_at = time.time()
    kill_appliance(victim)
    expired.wait(SESSION_MS / 1000 + 30)
    new = wait_until(lambda: (s := partition_state(zk, TOPIC, 0))["leader"] // 100 not in
                     (victim_id, -1) and s["leader"] >= 0 and s, 30, "a new leader",
                     interval_s=0.01)
    stat = zk.exists(f"/brokers/topics/{TOPIC}/partitions/0/state")
    times["election"] = stat.mtime / 1000
    leader = new["leader"]
    port = next(a for a in fleet if a.settings["broker.id"] == str(leader // 100)).port + (
        leader % 100)
    wait_until(lambda: metadata_leader(port) == leader, 30, "the worker to know",
               interval_s=0.005)
    times["worker"] = time.time()
    # the next ack is the new leader's (the victim's workers answer until they are killed)
    wait_until(lambda: producer.first_ack_after(times["election"]), 60, "the next ack",
               interval_s=0.01)
    times["ack"] = producer.first_ack_after(times["election"])
    times["client"] = producer.first_seen(leader, times["election"] - 0.5) or float("nan")
    times["kill"] = kill_at
    if TRACE is not None:
        TRACE.write(f"=== {times}\n")
    victim.start(timeout_s=60)
    wait_until(lambda: len(partition_state(zk, TOPIC, 0)["isr"]) == 3, 60, "a full ISR")
    return times


def run(label: str, code_dir: Path | None, kills: int, root: Path,
        client: dict[str, str], grace_ms: int | None = None,
        producer_class=TimedProducer) -> list[dict[str, float]]:
    if code_dir is not None:
        appliance_module.REPO = code_dir  # the appliances run that checkout's code
    ensemble = Ensemble(root / f"zk-{label}")
    ensemble.start()
    rows = []
    try:
        settings = {"default.replication.factor": "3", "auto.leader.rebalance.enable": "false"}
        if grace_ms is not None:  # a baseline checkout may not know the key
            settings["klog.metadata.departed.broker.grace.ms"] = str(grace_ms)
        spec = FleetSpec(f"/bench-failover-{label}", log_dirs=1, settings=settings)
        with running_fleet(ensemble, root / label, spec) as fleet:
            bootstrap = ",".join(a.bootstrap for a in fleet)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})]
                                )[TOPIC].result(30)
            zk = zk_client(ensemble, spec.chroot)
            wait_until(lambda: len(partition_state(zk, TOPIC, 0)["isr"]) == 3, 60, "ISR")
            producer = producer_class(bootstrap, client)
            try:
                for i in range(kills):
                    times = one_kill(fleet, zk, producer)
                    rows.append(times)
                    print(f"{label} kill {i + 1}: " + describe(times), flush=True)
            finally:
                producer.stop()
                zk.stop()
    finally:
        ensemble.close()
    return rows


def describe(t: dict[str, float]) -> str:
    return (f"ack-kill-session {t['ack'] - t['kill'] - SESSION_MS / 1000:+.3f} s; "
            f"expiry→election {t['election'] - t['expiry']:.3f}, "
            f"election→worker {t['worker'] - t['election']:.3f}, "
            f"election→client {t['client'] - t['election']:.3f}, "
            f"election→ack {t['ack'] - t['election']:.3f}")


def summary(label: str, rows: list[dict[str, float]]) -> None:
    over = sorted(t["ack"] - t["kill"] - SESSION_MS / 1000 for t in rows)
    after = sorted(t["ack"] - t["election"] for t in rows)
    p90 = over[min(len(over) - 1, int(0.9 * len(over)))]
    print(f"{label}: {len(rows)} kills, kill→ack minus session timeout "
          f"median {statistics.median(over):.3f} s, p90 {p90:.3f} s; "
          f"election→ack median {statistics.median(after):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--grace-ms", type=int, default=3000,
                        help="klog.metadata.departed.broker.grace.ms for this checkout "
                             "(off by default in the appliance; 3000 measured the gain)")
    parser.add_argument("--baseline", type=Path, help="a checkout to measure first (main)")
    parser.add_argument("--client", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the producer (default: its defaults)")
    parser.add_argument("--producer", choices=("librdkafka", "klog"), default="librdkafka",
                        help="whose producer is timed (klog: klog.Producer)")
    args = parser.parse_args()
    client = dict(item.split("=", 1) for item in args.client)
    producer_class = KlogTimedProducer if args.producer == "klog" else TimedProducer
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-failover-") as tmp:
        if args.baseline is not None:
            results["baseline"] = run("baseline", args.baseline, args.kills, Path(tmp),
                                      client, producer_class=producer_class)
        results["this"] = run("this", Path(__file__).resolve().parent.parent, args.kills,
                              Path(tmp), client, args.grace_ms, producer_class)
    for label, rows in results.items():
        summary(label, rows)


if __name__ == "__main__":
    main()
