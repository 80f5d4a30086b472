"""librdkafka's idempotent producer against acks=all and acks=1, at librdkafka's defaults.

Why this exists: perf/bench_transactions.py measured confluent-kafka's idempotent producer at
0.4-0.5x a plain acks=all producer flushing as often. The cause is in librdkafka (2.16.0,
confluent-kafka's), not klog, and this benchmark shows both parts of it side by side in one
run:

- **One Produce request in flight per partition.** librdkafka caps an idempotent producer at
  5 requests in flight per partition, but counts the *messages* in flight against that cap
  (``rd_kafka_toppar_producer_serve`` in rdkafka_broker.c: ``RD_KAFKA_IDEMP_MAX_INFLIGHT -
  rktp_msgs_inflight``; the counter is raised by each batch's message count in rdkafka_msg.c),
  so a batch of 5 messages or more stops the next request until its answer arrives (upstream
  pull request 4989, open, says the same). A plain producer pipelines (``max.in.flight``
  1,000,000). The "most in flight" column counts it from librdkafka's own protocol log.
  Against Apache Kafka it is the same client code, so the same one request at a time.
- **A start-up wait for the producer id.** librdkafka asks for the id on the first Metadata
  answer, while it is swapping its bootstrap connection for the learned broker's (2.10+); no
  connection is up then, so it retries on a 500 ms timer: the first message of an idempotent
  producer is delivered 0.5-1 s after ``list_topics`` returns, a plain producer's within
  milliseconds ("start-up" column). A loop timed from ``list_topics`` (bench_transactions')
  counts that wait as throughput; here each producer delivers one message before its clock
  starts, and "msg/s with start-up" shows what the wait would have cost.

What klog contributes, measured while writing this (2 cores shared, load 3-6): nothing that
differs with idempotence. Its time per Produce request is the same for the idempotent
producer's requests as for acks=all's (10.3 and 11.6 ms, ~3,000 messages each, fdatasync
2-3 ms of it, in the run below); acks=all's overlap about three at a time, the idempotent
producer waits for each, and its cycle was 19.5 ms, 9 ms of it in the client. The worker spends
about 3 ms of CPU on a 1 MB acks=all Produce (frame and parse 0.4 ms, append 0.3 ms in
Python, the rest the kernel's socket, page cache and the loop); a raw client sending 1 MB
idempotent requests one at a time gets each answered in 4-9 ms. An appliance whose acks=all
skipped the fdatasync (an experiment, not kept) moved the idempotent/acks=all ratio from 0.64
to 0.76 (5 rounds each); librdkafka's one request at a time stays. No request was answered
with an error ("errors": librdkafka's txerrs plus retries): no OUT_OF_ORDER_SEQUENCE_NUMBER,
no DUPLICATE_SEQUENCE_NUMBER, no epoch bump.

Figures, one run (load 5.6; medians of 5 rounds, 300,000 messages each): idempotent 174,130
msg/s, acks=all 308,022 (0.57), acks=1 346,793 (1.13); counting the start-up as
bench_transactions does, 0.45; start-up 527 ms against 30; most in flight 1 against 9;
3,333 messages per request against 2,542. Another run (load 3.3): 0.75 and 0.54.

Each round runs the three producers (idempotent, acks=all, acks=1; librdkafka's defaults
otherwise: linger 5 ms, batch.size 1 MB, batch.num.messages 10,000) on a fresh one-partition
topic each, in a rotating order, writing 200-byte messages and flushing every 100 ms
(``--flush-ms 0``: never, until the end), serving delivery reports every 1,000 messages.
Medians of the rounds; then one short pass per producer with librdkafka's protocol log on
(not timed: the log slows it) for the requests in flight.

Run: .venv/bin/python perf/bench_idempotent.py [--quick] [--rounds N] [--messages N]
     [--flush-ms N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import klog  # noqa: E402
from tests.conftest import Appliance, free_ports  # noqa: E402

VALUE = b"x" * 200
MODES = {  # name -> librdkafka settings besides bootstrap.servers (its defaults otherwise)
    "idempotent": {"enable.idempotence": True},
    "acks=all": {"acks": "all"},
    "acks=1": {"acks": "1"},
}
STATS_INTERVAL_MS = 100
METRICS_SETTLE_S = 1.2  # the workers publish their metrics every 0.5 s
SAMPLE = re.compile(r'^(klog_request_latency_seconds|klog_fdatasync_seconds)_(sum|count)'
                    r'\{([^}]*)\} (\S+)$', re.MULTILINE)
console = Console(highlight=False, width=150)


class InFlight(logging.Handler):
    """Counts Produce requests in flight from librdkafka's protocol log (SEND / RECV lines,
    in the order librdkafka wrote them)."""

    SENT = re.compile(r"Sent ProduceRequest")
    RECEIVED = re.compile(r"Received ProduceResponse")

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.now = self.most = self.requests = 0
        self.at_send: list[int] = []  # requests already in flight when each one was sent

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.SENT.search(text):
            self.at_send.append(self.now)
            self.now += 1
            self.requests += 1
            self.most = max(self.most, self.now)
        elif self.RECEIVED.search(text):
            self.now -= 1


def broker_totals(metrics_port: int) -> dict[str, float]:
    """The appliance's Produce latency and fdatasync time, summed over its workers (seconds,
    counts), from its Prometheus endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    totals = {"produce_sum": 0.0, "produce_count": 0.0, "sync_sum": 0.0, "sync_count": 0.0}
    for name, kind, labels, value in SAMPLE.findall(text):
        if name == "klog_fdatasync_seconds":
            totals[f"sync_{kind}"] += float(value)
        elif 'api="Produce"' in labels:
            totals[f"produce_{kind}"] += float(value)
    return totals


def new_producer(appliance: Appliance, mode: str, topic: str, **extra) -> Producer:
    """A producer connected, with one message delivered (so an idempotent one has its id)."""
    producer = Producer({"bootstrap.servers": appliance.bootstrap, **MODES[mode], **extra})
    producer.list_topics(topic, timeout=30)
    producer.produce(topic, b"first", partition=0)
    assert producer.flush(30) == 0, f"{mode}: the first message was not delivered"
    return producer


def produce_loop(producer: Producer, topic: str, messages: int, flush_s: float) -> float:
    """Seconds to produce `messages` and have them all delivered, flushing every `flush_s`
    (0: only at the end)."""
    started = time.perf_counter()
    next_flush = started + flush_s
    for n in range(messages):
        if n % 1000 == 0:
            producer.poll(0)
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.001)
        if flush_s and time.perf_counter() >= next_flush:
            assert producer.flush(60) == 0
            next_flush = time.perf_counter() + flush_s
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def one_run(appliance: Appliance, metrics_port: int, mode: str, topic: str, messages: int,
            flush_s: float) -> dict:
    """msg/s, start-up seconds (Producer() to the first message delivered), librdkafka's
    errors and retries, and the broker's side of the loop: Produce requests, their mean
    latency (read to answered) and the mean fdatasync."""
    samples: list[dict] = []
    began = time.perf_counter()
    producer = new_producer(appliance, mode, topic, **{
        "statistics.interval.ms": STATS_INTERVAL_MS,
        "stats_cb": lambda text: samples.append(json.loads(text))})
    startup_s = time.perf_counter() - began
    time.sleep(METRICS_SETTLE_S)
    before = broker_totals(metrics_port)
    seconds = produce_loop(producer, topic, messages, flush_s)
    wanted = len(samples) + 1
    deadline = time.monotonic() + 5
    while len(samples) < wanted and time.monotonic() < deadline:  # counters after the end
        producer.poll(0.05)
    brokers = [b for b in samples[-1]["brokers"].values() if b["nodeid"] >= 0]
    time.sleep(METRICS_SETTLE_S)
    after = broker_totals(metrics_port)
    delta = {k: after[k] - before[k] for k in after}
    requests = max(delta["produce_count"], 1)
    return {"rate": messages / seconds, "startup_s": startup_s,
            "with_startup": messages / (seconds + startup_s), "requests": requests,
            "loop_ms": seconds * 1000 / requests,
            "broker_ms": delta["produce_sum"] * 1000 / requests,
            "sync_ms": delta["sync_sum"] * 1000 / max(delta["sync_count"], 1),
            "errors": sum(b["txerrs"] + b["txretries"] for b in brokers)}


def in_flight_pass(appliance: Appliance, mode: str, topic: str, messages: int,
                   flush_s: float) -> InFlight:
    """One untimed run with librdkafka's protocol log: its Produce requests in flight."""
    counter = InFlight()
    logger = logging.getLogger(f"bench-idempotent-{mode}")
    logger.propagate = False
    logger.addHandler(counter)
    logger.setLevel(logging.DEBUG)
    producer = new_producer(appliance, mode, topic, debug="protocol", logger=logger)
    counter.now = counter.most = counter.requests = 0
    counter.at_send.clear()
    produce_loop(producer, topic, messages, flush_s)
    producer.poll(0.5)  # the last log lines
    return counter


def create_topic(appliance: Appliance, name: str) -> str:
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(name, 1)
    return name


def bench(appliance: Appliance, metrics_port: int, rounds: int, messages: int,
          flush_s: float) -> None:
    modes = list(MODES)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    per_round = Table(title="per round (msg/s, clock started after the first delivery)")
    per_round.add_column("round")
    for mode in modes:
        per_round.add_column(mode, justify="right")
    per_round.add_column("idempotent / acks=all", justify="right")
    for n in range(1, rounds + 1):
        for mode in modes[n % len(modes):] + modes[:n % len(modes)]:
            topic = create_topic(appliance, f"bench-idem-{n}-{modes.index(mode)}")
            runs[mode].append(one_run(appliance, metrics_port, mode, topic, messages, flush_s))
        per_round.add_row(str(n), *(f"{runs[m][-1]['rate']:,.0f}" for m in modes),
                          f"{runs['idempotent'][-1]['rate'] / runs['acks=all'][-1]['rate']:.2f}")
    console.print(per_round)

    def median(mode: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[mode])

    passes = {m: in_flight_pass(appliance, m, create_topic(appliance, f"bench-idem-log-{i}"),
                                min(messages, 100_000), flush_s) for i, m in enumerate(modes)}
    summary = Table(title=f"medians of {rounds} round(s), {messages:,} messages of "
                          f"{len(VALUE)} bytes each; ratios against acks=all")
    for column in ("producer", "msg/s", "ratio", "start-up ms", "msg/s with start-up",
                   "ratio", "Produce requests", "msgs / request", "loop ms / request",
                   "broker ms / request", "fdatasync ms", "errors", "most in flight",
                   "mean in flight at send"):
        if column == "producer":
            summary.add_column(column, no_wrap=True, min_width=len("idempotent"))
        else:
            summary.add_column(column, justify="right")
    base, base_cold = median("acks=all", "rate"), median("acks=all", "with_startup")
    for mode in modes:
        rate, cold, requests = (median(mode, k) for k in ("rate", "with_startup", "requests"))
        log = passes[mode]
        summary.add_row(mode, f"{rate:,.0f}", f"{rate / base:.2f}",
                        f"{median(mode, 'startup_s') * 1000:,.0f}", f"{cold:,.0f}",
                        f"{cold / base_cold:.2f}", f"{requests:,.0f}",
                        f"{messages / requests:,.0f}", f"{median(mode, 'loop_ms'):.1f}",
                        f"{median(mode, 'broker_ms'):.1f}", f"{median(mode, 'sync_ms'):.1f}",
                        str(max(run["errors"] for run in runs[mode])), str(log.most),
                        f"{statistics.mean(log.at_send or [0]):.2f}")
    console.print(summary)
    console.print("loop ms / request: the loop's time over its Produce requests (for a "
                  "producer with one request in flight, its cycle); broker ms / request: "
                  "klog's, from reading a request to writing its answer (Prometheus); most / "
                  "mean in flight: Produce requests awaiting an answer once librdkafka sent "
                  "one / already awaiting one when it did, from a separate untimed pass with "
                  "its protocol log")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--messages", type=int)
    parser.add_argument("--flush-ms", type=int, default=100)
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    messages = args.messages or (100_000 if args.quick else 300_000)
    with tempfile.TemporaryDirectory(prefix="klog-bench-idem-") as tmp:
        port, metrics_port = free_ports(2), free_ports(1)
        while port <= metrics_port < port + 2:
            metrics_port = free_ports(1)
        appliance = Appliance(Path(tmp) / "appliance", log_dirs=2, port=port,
                              settings={"auto.create.topics.enable": "true",
                                        "metrics.port": metrics_port})
        console.print(f"idempotent producer benchmark (load {os.getloadavg()[0]:.1f}), "
                      f"flushing every {args.flush_ms} ms")
        appliance.start()
        try:
            bench(appliance, metrics_port, rounds, messages, args.flush_ms / 1000)
        finally:
            appliance.stop()
        console.print(f"(load at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
