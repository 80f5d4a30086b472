"""One consumer-group member in its own process, for the group tests: any of the four clients.

    python member.py CLIENT BOOTSTRAP GROUP TOPIC OUT [--instance-id ID] [--session-ms N]

It subscribes, and appends JSON lines to OUT as things happen (flushed at once, so a kill -9
loses nothing written): ``{"t", "event": "assign"|"revoke", "partitions": [...]}`` from the
client's own rebalance callbacks, and ``{"t", "event": "records", "items": [[p, offset,
value], ...]}``. Offsets are committed by the client's auto-commit every 500 ms. SIGTERM makes
it close the consumer (a last commit, and a LeaveGroup for dynamic members) and exit 0. ``t`` is
CLOCK_MONOTONIC, which every process of the machine shares.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

COMMIT_INTERVAL_MS = 500
HEARTBEAT_MS = 1000
stopping = False


def _stop(*_):
    global stopping
    stopping = True


class Log:
    def __init__(self, path: str):
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the process

    def event(self, kind: str, **fields) -> None:
        self.file.write(orjson.dumps({"t": time.monotonic(), "event": kind, **fields}) + b"\n")

    def ownership(self, kind: str, partitions) -> None:
        self.event(kind, partitions=sorted(p for p in partitions))

    def records(self, items) -> None:
        if items:
            self.event("records", items=items)


def run_confluent(args, out: Log) -> None:
    import confluent_kafka as ck
    settings = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
                "auto.offset.reset": "earliest", "session.timeout.ms": args.session_ms,
                "heartbeat.interval.ms": HEARTBEAT_MS,
                "auto.commit.interval.ms": COMMIT_INTERVAL_MS}
    if args.instance_id:
        settings["group.instance.id"] = args.instance_id
    consumer = ck.Consumer(settings)
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, ps: out.ownership("assign", [p.partition for p in ps]),
        on_revoke=lambda c, ps: out.ownership("revoke", [p.partition for p in ps]))
    while not stopping:
        batch = consumer.consume(500, timeout=0.2)
        out.records([[m.partition(), m.offset(), m.value().decode()]
                     for m in batch if m.error() is None])
    consumer.close()


def run_kafka_python(args, out: Log) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.ownership("revoke", [tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            out.ownership("assign", [tp.partition for tp in assigned])

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
        auto_commit_interval_ms=COMMIT_INTERVAL_MS, group_instance_id=args.instance_id)
    consumer.subscribe([args.topic], listener=Listener())
    while not stopping:
        polled = consumer.poll(timeout_ms=200)
        out.records([[tp.partition, m.offset, m.value.decode()]
                     for tp, messages in polled.items() for m in messages])
    consumer.close()


def run_aiokafka(args, out: Log) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out.ownership("revoke", [tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            out.ownership("assign", [tp.partition for tp in assigned])

    async def main():
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap, group_id=args.group,
            auto_offset_reset="earliest", session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS, auto_commit_interval_ms=COMMIT_INTERVAL_MS)
        consumer.subscribe([args.topic], listener=Listener())
        await consumer.start()
        try:
            while not stopping:
                polled = await consumer.getmany(timeout_ms=200)
                out.records([[tp.partition, m.offset, m.value.decode()]
                             for tp, messages in polled.items() for m in messages])
        finally:
            await consumer.stop()

    asyncio.run(main())


def run_klog(args, out: Log) -> None:
    import klog
    options = dict(bootstrap_servers=args.bootstrap, group_id=args.group,
                   auto_offset_reset="earliest", session_timeout_ms=args.session_ms,
                   heartbeat_interval_ms=HEARTBEAT_MS,
                   auto_commit_interval_ms=COMMIT_INTERVAL_MS)
    if args.instance_id:
        options["group_instance_id"] = args.instance_id
    consumer = klog.Consumer(**options)
    consumer.subscribe([args.topic],
                       on_assign=lambda ps: out.ownership("assign", [p.partition for p in ps]),
                       on_revoke=lambda ps: out.ownership("revoke", [p.partition for p in ps]))
    while not stopping:
        polled = consumer.poll(timeout_ms=200)
        out.records([[tp.partition, r.offset, r.value.decode()]
                     for tp, records in polled.items() for r in records])
    consumer.close()


CLIENTS = {"confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka, "klog": run_klog}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=sorted(CLIENTS))
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("--instance-id")
    parser.add_argument("--session-ms", type=int, default=6000)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    out = Log(args.out)
    out.event("started", client=args.client)
    CLIENTS[args.client](args, out)
    out.event("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
