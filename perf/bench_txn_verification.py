"""What KIP-890's verification costs a transactional producer: the same confluent-kafka
transactional producer against two appliances of two workers, one with
``transaction.partition.verification.enable=true`` (the default) and one with it false.

Verification costs one AddPartitionsToTxn v4 round trip to the coordinator per partition a
transaction starts on (batched per coordinator node), before the first batch there is
appended; later batches of the same transaction pay nothing. So two workloads:

- throughput: 200-byte messages as fast as the producer goes to a topic of 4 partitions
  (spread over both workers), a commit every 100 ms (issue 23's interval): messages/s;
- short transactions: one message to each of the 4 partitions per transaction, committed at
  once, back to back: transactions/s (every batch starts a transaction: the worst case).

Each transactional id is one whose coordinator is worker 1, so the partitions led by worker 0
are verified over the listener and those of worker 1 in-process. The two appliances run side
by side and alternate, round after round and in turn first; the summary gives medians and the
ratio on/off.

Run: .venv/bin/python perf/bench_txn_verification.py [--quick] [--rounds N] [--messages N]
     [--transactions N]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import klog  # noqa: E402
from klog.protocol.apis import find_coordinator  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.transactions.coordinator_helpers import SETTINGS  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

VALUE = b"x" * 200
PARTITIONS = 4
COMMIT_EVERY_S = 0.1
console = Console(highlight=False, width=110)
NAMES = itertools.count()


def coordinated_by_second_worker(appliance: Appliance, prefix: str) -> str:
    client = RawClient(appliance.port)
    try:
        for n in NAMES:
            name = f"{prefix}-{n}"
            while True:
                answer = client.call(find_coordinator, 2, key=name, key_type=1)
                if answer.error_code == 0:
                    break
                time.sleep(0.1)
            if answer.port == appliance.port + 1:
                return name
    finally:
        client.close()
    raise AssertionError("unreachable")


def producer(appliance: Appliance, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": appliance.bootstrap, "transactional.id": transactional_id,
                  "linger.ms": 5, "acks": "all"})
    p.init_transactions(30)
    return p


def warm(p: Producer, topic: str) -> None:
    """Connected to every leader and one transaction done before the clock starts."""
    p.list_topics(topic, timeout=30)
    p.begin_transaction()
    for partition in range(PARTITIONS):
        p.produce(topic, VALUE, partition=partition)
    p.commit_transaction(60)


def throughput(appliance: Appliance, topic: str, messages: int) -> float:
    p = producer(appliance, coordinated_by_second_worker(appliance, "bench-tput"))
    warm(p, topic)
    started = time.perf_counter()
    p.begin_transaction()
    next_commit = started + COMMIT_EVERY_S
    for n in range(messages):
        if n % 1000 == 0:
            p.poll(0)
        while True:
            try:
                p.produce(topic, VALUE, partition=n % PARTITIONS)
                break
            except BufferError:
                p.poll(0.001)
        if time.perf_counter() >= next_commit:
            p.commit_transaction(60)
            p.begin_transaction()
            next_commit = time.perf_counter() + COMMIT_EVERY_S
    p.commit_transaction(60)
    return messages / (time.perf_counter() - started)


def short_transactions(appliance: Appliance, topic: str, transactions: int) -> float:
    p = producer(appliance, coordinated_by_second_worker(appliance, "bench-short"))
    warm(p, topic)
    started = time.perf_counter()
    for _ in range(transactions):
        p.begin_transaction()
        for partition in range(PARTITIONS):
            p.produce(topic, VALUE, partition=partition)
        p.commit_transaction(60)
    return transactions / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--transactions", type=int)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    messages = args.messages or (30_000 if args.quick else 200_000)
    transactions = args.transactions or (100 if args.quick else 400)
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="klog-bench-kip890-") as tmp:
        appliances = {
            mode: Appliance(Path(tmp) / mode, log_dirs=2, settings={
                **SETTINGS, "transaction.partition.verification.enable": flag})
            for mode, flag in (("verification on", "true"), ("verification off", "false"))}
        console.print(f"KIP-890 verification benchmark (load {os.getloadavg()[0]:.1f})")
        for appliance in appliances.values():
            appliance.start()
        try:
            for appliance in appliances.values():
                with klog.Admin(appliance.bootstrap) as admin:
                    admin.create_topic("bench-kip890", PARTITIONS)
            for r in range(rounds):
                order = list(appliances) if r % 2 == 0 else list(reversed(appliances))
                for mode in order:
                    appliance, topic = appliances[mode], "bench-kip890"
                    rate = throughput(appliance, topic, messages)
                    short = short_transactions(appliance, topic, transactions)
                    figures.setdefault((mode, "messages/s"), []).append(rate)
                    figures.setdefault((mode, "transactions/s"), []).append(short)
                    console.print(f"round {r + 1} {mode}: {rate:,.0f} messages/s, "
                                  f"{short:,.1f} short transactions/s")
        finally:
            for appliance in appliances.values():
                appliance.stop()
    table = Table(title=f"medians of {rounds} round(s); {PARTITIONS} partitions, 2 workers")
    for column in ("workload", "verification on", "verification off", "on / off"):
        table.add_column(column, justify="right")
    for workload in ("messages/s", "transactions/s"):
        on = statistics.median(figures[("verification on", workload)])
        off = statistics.median(figures[("verification off", workload)])
        table.add_row(workload, f"{on:,.1f}", f"{off:,.1f}", f"{on / off:.3f}")
    console.print(table)
    console.print(f"(load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
