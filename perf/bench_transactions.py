"""Transactions benchmark (issue 23): what a transaction costs, against the same work without.

Figures, one run, one appliance of two workers:
- produce: confluent-kafka's Producer writing 200-byte messages to a one-partition topic as
  fast as it can, committing a transaction every 100 ms (``transactional.id``; each commit
  is librdkafka's flush, EndTxn, the markers), against the same producer without a
  transactional id (idempotent, acks=all: what a transactional producer is besides its
  transactions) flushing every 100 ms, so that only the transaction differs; and against
  a producer that is not idempotent (acks=all), flushing alike. (Flushing: a producer that
  never flushes fills librdkafka's local queue and this loop then waits on it, which made
  it slower than the others here.) Kafka's own figure at that interval is a few per cent
  of throughput. They alternate, round after round and in turn first, so the machine's
  drift (two cores shared) hits all alike; each round prints its ratios, the summary the
  medians.
- consume: the committed data the transactional producer wrote (a marker every 100 ms) read
  from offset 0 by confluent-kafka's Consumer in read_committed and in read_uncommitted
  (timed from the first batch to the last, so connecting is left out; the queue tuned as in
  perf/bench_security.py so librdkafka's 1 s fetch backoff does not decide the figure),
  the two in turn first.
- recovery: a transaction left in PrepareCommit by a kill -9 of the whole appliance (the
  partition's leader is stopped with SIGSTOP after EndTxn, so its markers cannot land: the
  window between EndTxn and the markers held open), then a restart: the time from the
  restart until the new coordinator answers CompleteCommit (its load of
  ``__transaction_state`` and the markers sent again), beside the same restart with the
  transaction already complete (the baseline: a restart and a load). Median of a few;
  "serving" is when every worker reports SERVING in shm, which is after the coordinator's
  load in an appliance alone (it loads ``__transaction_state`` before it serves).

Run: .venv/bin/python perf/bench_transactions.py [--quick] [--rounds N] [--messages N]
     [--restarts N]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import klog  # noqa: E402
from klog.protocol.apis import metadata  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.transactions.coordinator_helpers import (  # noqa: E402
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    end,
    init,
)
from tests.worker.raw import RawClient  # noqa: E402

VALUE = b"x" * 200
MB = 1 << 20
COMMIT_EVERY_S = 0.1
QUEUE_TUNED = {"queued.min.messages": 10_000_000, "fetch.queue.backoff.ms": 10}
console = Console(highlight=False, width=110)


def create_topic(appliance: Appliance, name: str, partitions: int = 1) -> str:
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(name, partitions)
    return name


# -- produce ----------------------------------------------------------------------------------

PRODUCERS = {  # mode -> (transactional, idempotent); each flushes or commits every 100 ms
    "acks=all": (False, False),
    "idempotent": (False, True),
    "transactional": (True, True),
}


def produce_rate(appliance: Appliance, topic: str, messages: int, mode: str,
                 transactional_id: str) -> tuple[float, int]:
    """(messages per second from the first produce() to the last commit or flush, commits
    or flushes on the way)."""
    transactional, idempotent = PRODUCERS[mode]
    conf = {"bootstrap.servers": appliance.bootstrap, "enable.idempotence": idempotent,
            "acks": "all", "linger.ms": 5}
    if transactional:
        conf["transactional.id"] = transactional_id
    producer = Producer(conf)
    if transactional:
        producer.init_transactions(30)
    producer.list_topics(topic, timeout=30)  # connected before the clock starts
    # one message delivered before it too: librdkafka's idempotent producer waits 0.5-1 s
    # for its producer id on its first send (perf/bench_idempotent.py), which is not the
    # steady rate this compares
    if transactional:
        producer.begin_transaction()
    producer.produce(topic, VALUE, partition=0)
    if transactional:
        producer.commit_transaction(60)
    else:
        assert producer.flush(60) == 0
    ends = 0
    started = time.perf_counter()
    if transactional:
        producer.begin_transaction()
    next_end = started + COMMIT_EVERY_S
    for n in range(messages):
        if n % 1000 == 0:
            producer.poll(0)  # serve delivery reports as an application does (all alike)
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.001)
        if time.perf_counter() >= next_end:
            if transactional:
                producer.commit_transaction(60)
                producer.begin_transaction()
            else:
                assert producer.flush(60) == 0
            ends += 1
            next_end = time.perf_counter() + COMMIT_EVERY_S
    if transactional:
        producer.commit_transaction(60)
    else:
        assert producer.flush(120) == 0
    return messages / (time.perf_counter() - started), ends + 1


def consume_rate(appliance: Appliance, topic: str, messages: int, isolation: str) -> float:
    """Messages per second from the first batch received to the last (partition 0 from 0)."""
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "bench-txn",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         **QUEUE_TUNED})
    consumer.assign([TopicPartition(topic, 0, 0)])
    total, timed, started, deadline = 0, 0, None, time.monotonic() + 300
    try:
        while total < messages and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 1.0)
            good = sum(1 for m in batch if m.error() is None)
            total += good
            if started is None:
                if good:
                    started = time.perf_counter()
                continue
            timed += good
    finally:
        consumer.close()
    assert total == messages, f"{isolation}: consumed {total} of {messages}"
    return timed / (time.perf_counter() - started)


def bench_throughput(appliance: Appliance, rounds: int, messages: int) -> None:
    console.print(f"\n[bold]throughput[/bold]: confluent-kafka, {messages:,} messages of "
                  f"{len(VALUE)} bytes per round and producer, one partition; the "
                  f"producers take turns at running first")
    modes = list(PRODUCERS)
    figures: dict[str, list[float]] = {m: [] for m in modes}
    figures.update({"read_uncommitted": [], "read_committed": []})
    commits = []
    per_round = Table(title="per round (msg/s)")
    per_round.add_column("round")
    for kind in figures:
        per_round.add_column(kind, justify="right")
    per_round.add_column("txn / idempotent", justify="right")
    per_round.add_column("committed / uncommitted", justify="right")
    for n in range(1, rounds + 1):
        order = modes[n % len(modes):] + modes[:n % len(modes)]
        txn_topic = None
        for mode in order:
            topic = create_topic(appliance, f"bench-{n}-{modes.index(mode)}")
            rate, ends = produce_rate(appliance, topic, messages, mode, f"bench-{n}")
            figures[mode].append(rate)
            if PRODUCERS[mode][0]:
                txn_topic, made = topic, ends
        commits.append(made)
        isolations = ("read_uncommitted", "read_committed")
        for isolation in (isolations if n % 2 else isolations[::-1]):
            figures[isolation].append(consume_rate(appliance, txn_topic, messages, isolation))
        per_round.add_row(str(n), *(f"{values[-1]:,.0f}" for values in figures.values()),
                          f"{figures[modes[2]][-1] / figures[modes[1]][-1]:.2f}",
                          f"{figures['read_committed'][-1] / figures['read_uncommitted'][-1]:.2f}")
    console.print(per_round)
    medians = {kind: statistics.median(values) for kind, values in figures.items()}
    summary = Table(title=f"medians of {rounds} round(s); {statistics.median(commits):.0f} "
                          f"commits per transactional run")
    summary.add_column("figure")
    summary.add_column("baseline", justify="right")
    summary.add_column("with transactions", justify="right")
    summary.add_column("ratio", justify="right")
    for label, base, other in (
            ("produce msg/s: idempotent → transactional", modes[1], modes[2]),
            ("produce msg/s: acks=all → transactional", modes[0], modes[2]),
            ("consume msg/s: read_uncommitted → read_committed", "read_uncommitted",
             "read_committed")):
        summary.add_row(label, f"{medians[base]:,.0f} ({medians[base] * len(VALUE) / MB:.1f} "
                               f"MB/s)",
                        f"{medians[other]:,.0f} ({medians[other] * len(VALUE) / MB:.1f} MB/s)",
                        f"{medians[other] / medians[base]:.2f}")
    console.print(summary)


# -- recovery ---------------------------------------------------------------------------------

def leader_port(appliance: Appliance, topic: str, partition: int) -> int:
    probe = RawClient(appliance.port)
    try:
        answer = probe.call(metadata, 1, topics=[metadata.MetadataRequestTopic(name=topic)])
    finally:
        probe.close()
    ports = {b.node_id: b.port for b in answer.brokers}
    (wanted,) = [p for p in answer.topics[0].partitions if p.partition_index == partition]
    return ports[wanted.leader_id]


def kill_9(appliance: Appliance) -> None:
    """SIGKILL to the supervisor, then to every worker (a stopped one too)."""
    pids = [pid for pid in appliance.pids().values() if pid > 0]
    appliance.kill()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        while os.path.exists(f"/proc/{pid}") and \
                Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.01)


def one_restart(appliance: Appliance, topic: str, transactional_id: str,
                leave_prepared: bool) -> tuple[float, float]:
    """(restart → serving, restart → CompleteCommit answered) in seconds."""
    client = coordinator(appliance, transactional_id)
    coordinator_port = client.sock.getpeername()[1]
    partition = next(p for p in (0, 1) if leader_port(appliance, topic, p) != coordinator_port)
    pid = init(client, transactional_id, retry_s=10)
    assert pid.error_code == 0, pid
    assert add_partitions(client, transactional_id, pid.producer_id, pid.producer_epoch,
                          {topic: [partition]})[(topic, partition)] == 0
    stopped = None
    if leave_prepared:
        index = appliance.ports().index(leader_port(appliance, topic, partition))
        stopped = appliance.worker_pid(index)
        os.kill(stopped, signal.SIGSTOP)
    assert end(client, transactional_id, pid.producer_id, pid.producer_epoch, True) == 0
    wanted = "PrepareCommit" if leave_prepared else "CompleteCommit"
    deadline = time.monotonic() + 10
    while describe(client, transactional_id).transaction_state != wanted:
        assert time.monotonic() < deadline, f"never {wanted}"
        time.sleep(0.01)
    client.close()
    kill_9(appliance)
    started = time.perf_counter()
    appliance.start(timeout_s=60)
    serving = time.perf_counter() - started
    deadline = time.monotonic() + 60
    while True:
        try:
            client = coordinator(appliance, transactional_id)
            state = describe(client, transactional_id)
            client.close()
            if state.error_code == 0 and state.transaction_state == "CompleteCommit":
                break
        except (OSError, ConnectionError):
            pass
        assert time.monotonic() < deadline, "the new coordinator did not complete it"
        time.sleep(0.005)
    return serving, time.perf_counter() - started


def bench_recovery(appliance: Appliance, restarts: int) -> None:
    topic = create_topic(appliance, "bench-recovery", partitions=2)
    console.print(f"\n[bold]recovery[/bold]: kill -9 of the appliance (2 workers), restart, "
                  f"until the new coordinator answers CompleteCommit; {restarts} of each, "
                  f"alternating")
    rows = {True: [], False: []}
    for n in range(restarts):
        for prepared in (False, True):
            rows[prepared].append(one_restart(appliance, topic, f"bench-recovery-{n}",
                                              prepared))
    table = Table(title="restart after kill -9 (ms, median; min-max)")
    table.add_column("left behind")
    table.add_column("restart → serving", justify="right")
    table.add_column("restart → CompleteCommit", justify="right")
    table.add_column("serving → CompleteCommit", justify="right")
    for prepared, label in ((False, "a completed transaction (baseline)"),
                            (True, "a transaction in PrepareCommit")):
        serving = [s * 1000 for s, _ in rows[prepared]]
        whole = [w * 1000 for _, w in rows[prepared]]
        after = [(w - s) * 1000 for s, w in rows[prepared]]
        table.add_row(label, *(f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"
                               for v in (serving, whole, after)))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--restarts", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    messages = args.messages or (50_000 if args.quick else 300_000)
    restarts = args.restarts or (2 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="klog-bench-txn-") as tmp:
        appliance = Appliance(Path(tmp) / "appliance", log_dirs=2, settings=SETTINGS)
        console.print(f"transactions benchmark (load {os.getloadavg()[0]:.1f})")
        appliance.start()
        try:
            bench_throughput(appliance, rounds, messages)
            bench_recovery(appliance, restarts)
        finally:
            appliance.stop()
        console.print(f"(load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
