"""A consume-transform-produce loop with confluent-kafka, run as its own process by the
exactly-once tests so that a kill -9 can hit it (or the appliance) at any point.

Each transaction: consume up to ``--batch`` records of the input (read_committed), produce
each transformed (``out:`` + value, same key) to the same partition of the output, commit
the consumer's positions with ``send_offsets_to_transaction`` and the consumer's group
metadata, ``commit_transaction``. It prints ``committed <n>`` after each commit. Any error it
cannot simply retry ends the process (exit 3): the test starts a new one, whose
``init_transactions`` fences this one and aborts its open transaction, as a real service
restarted by its supervisor.

``--kill-after-commit PID,PID,...``: right after the first commit returns, SIGKILL those pids
(an appliance's supervisor and workers): the coordinator has answered EndTxn and may not have
written every marker yet.

Usage: python -m tests.transactions.exactly_once_loop BOOTSTRAP INPUT OUTPUT GROUP TXN_ID
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer


def _retry(call, what: str, deadline_s: float = 60.0):
    """Retry a transactional call while librdkafka says it is retriable."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.retriable() and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            print(f"{what} failed: {error}", flush=True)
            raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        parser.add_argument(name)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--instance", default=None, help="group.instance.id (static member)")
    parser.add_argument("--assign", type=int, default=0,
                        help="assign() these many input partitions instead of subscribing")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between transactions")
    parser.add_argument("--kill-after-commit", default="")
    args = parser.parse_args(argv)

    consumer_config = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300, "socket.timeout.ms": 10_000,
    }
    if args.instance:
        consumer_config["group.instance.id"] = args.instance
    if os.environ.get("KLOG_LOOP_DEBUG"):  # e.g. "cgrp" when a run needs explaining
        consumer_config["debug"] = os.environ["KLOG_LOOP_DEBUG"]
    consumer = Consumer(consumer_config)
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": 60_000, "message.timeout.ms": 60_000,
        "socket.timeout.ms": 10_000, "linger.ms": 5,
        **({"debug": os.environ["KLOG_LOOP_DEBUG"]} if os.environ.get("KLOG_LOOP_DEBUG") else {}),
    })
    _retry(lambda: producer.init_transactions(30), "init_transactions")
    if args.assign:
        from confluent_kafka import TopicPartition

        consumer.assign([TopicPartition(args.input, p) for p in range(args.assign)])
    else:
        consumer.subscribe([args.input])
    print("ready", flush=True)
    commits = 0
    while True:
        records = consumer.consume(num_messages=args.batch, timeout=0.5)
        records = [r for r in records if r.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        for record in records:
            producer.produce(args.output, value=b"out:" + record.value(), key=record.key(),
                             partition=record.partition())
        positions = consumer.position(consumer.assignment())
        # short deadlines: a restarted loop (as a service's supervisor would start one) goes
        # on sooner than a long retry; librdkafka may also hang here past the timeout
        # (confluentinc/librdkafka#5456, #5511): the tests restart a loop that stalls
        _retry(lambda positions=positions: producer.send_offsets_to_transaction(
            positions, consumer.consumer_group_metadata(), 5), "send_offsets_to_transaction",
            deadline_s=8)
        _retry(lambda: producer.commit_transaction(15), "commit_transaction", deadline_s=15)
        commits += 1
        if args.kill_after_commit:  # between EndTxn and the markers
            for pid in args.kill_after_commit.split(","):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            args.kill_after_commit = ""
        print(f"committed {commits}", flush=True)
        if args.pause:
            time.sleep(args.pause)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as exc:
        print(f"exiting: {exc}", flush=True)
        sys.exit(3)
