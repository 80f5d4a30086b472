"""Client benchmark (issue 5): klog's Python client beside librdkafka, same run, same broker.

The paper's experiment on this machine, 200-byte messages, one client process:

- first, both clients as a new user meets them (issues 14 and 26): klog's Producer at its
  defaults (acks=all, idempotent, 1 MB batches) and confluent-kafka's Producer at its defaults,
  one ``send()`` / ``produce()`` per message, to a fresh one-partition topic each, in rounds
  that alternate the clients (``--rounds``, 3 by default: the machine's drift hits both alike);
  each round also runs klog's pure-Python path (a child process with ``KLOG_PURE_PYTHON=1``,
  the fallback where the compiled send and codec are not built) and ``send_batch`` of 50
  values at the defaults. These rows are printed first, as the median of the rounds' ratios
  (each round's ratio is to that round's librdkafka figure), with every round's figures;
- producer, one message per ``send()`` (the paper's "batch 1"), and ``send_batch`` of 50
  (the paper's batches of 50); baseline: confluent-kafka (librdkafka) producing the same
  messages to the same appliance, one ``produce()`` each. Both clients: acks=1, linger 5 ms,
  1 MB batches, no compression (the paper had no acks; librdkafka's batch default).
  klog is also shown with its defaults (acks=all, idempotent, 1 MB batches), and with Java's
  16 KiB batches (the default before issue 14; perf/bench_produce_defaults.py says why).
- consumer reading N messages (10 million; 1 million with --quick) from the beginning of a
  two-partition topic, klog at its defaults; baseline: confluent-kafka's consumer
  (``consume(10000)`` batches) both at its defaults (issue 26's row) and with its prefetch
  queue unthrottled (``queued.min.messages`` 1M, ``fetch.queue.backoff.ms`` 0): librdkafka's
  defaults pause fetching for a second whenever 100k messages are queued, which caps it
  near 150k msg/s here. Three alternating rounds of the three readers, medians, with the
  CPU time per message of each (steadier than the rates on a shared machine).

The appliance has two workers (one per log dir), so the two partitions of each topic live on
different workers and both clients talk to two nodes, as in the issue's setup.

Figures only, no assertions. ``--profile`` adds where klog's time goes: py-spy samples of
every thread (the producer has two) during a consumer run and two producer runs.

Run: .venv/bin/python perf/bench_client.py [--quick] [--profile] [--rounds N]
     .venv/bin/python perf/bench_client.py --consume-rounds 5 [--quick]   (consume rows only)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import klog  # noqa: E402
from tests.conftest import Appliance  # noqa: E402

VALUE = b"x" * 200
SAME = {"acks": 1, "linger_ms": 5, "batch_size": 1_000_000}
CONFLUENT = {"acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
             "queue.buffering.max.kbytes": 1_048_576, "queue.buffering.max.messages": 2_000_000}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (the supervisor and its workers)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def produce_one_at_a_time(bootstrap: str, topic: str, count: int, **options) -> float:
    with klog.Producer(bootstrap_servers=bootstrap, **options) as producer:
        producer.send(topic, VALUE).result(30)  # metadata, producer id, connections
        send = producer.send
        start = time.perf_counter()
        for _ in range(count):
            send(topic, VALUE)
        producer.flush()
        return count / (time.perf_counter() - start)


def produce_batches(bootstrap: str, topic: str, count: int, size: int = 50, **options) -> float:
    values = [VALUE] * size
    with klog.Producer(bootstrap_servers=bootstrap, **options) as producer:
        producer.send(topic, VALUE).result(30)
        send_batch = producer.send_batch
        start = time.perf_counter()
        for _ in range(count // size):
            send_batch(topic, values)
        producer.flush()
        return count // size * size / (time.perf_counter() - start)


def produce_pure(bootstrap: str, topic: str, count: int, batches: bool = False) -> float:
    """klog at its defaults on the pure-Python path: this script in a child process with
    ``KLOG_PURE_PYTHON=1`` (the switch is read at import, so it cannot be flipped here)."""
    out = subprocess.run(
        [sys.executable, __file__, "--pure-child", bootstrap, topic, str(count),
         "batches" if batches else "one"],
        env={**os.environ, "KLOG_PURE_PYTHON": "1"}, capture_output=True, text=True,
        timeout=600, check=True)
    return float(out.stdout.split()[-1])


def pure_child(bootstrap: str, topic: str, count: str, kind: str) -> None:
    from klog.producer import fast_send
    from klog.protocol import records_codec
    assert fast_send.IMPLEMENTATION == records_codec.IMPLEMENTATION == "python"
    run = produce_batches if kind == "batches" else produce_one_at_a_time
    print(run(bootstrap, topic, int(count)))


def defaults_rounds(bootstrap: str, rounds: int, count: int) -> list[tuple]:
    """Both clients at their defaults, one partition, alternating round after round: the
    rows of the median ratio to librdkafka, each round's figures printed as it ends."""
    names = ("confluent", "klog", "pure", "batches", "pure-batches")
    with klog.Admin(bootstrap) as admin:
        for n in range(rounds):
            for name in names:
                admin.create_topic(f"defaults-{name}-{n}", 1)
    runs = {
        "confluent": lambda t: produce_confluent(bootstrap, t, count, {}),
        "klog": lambda t: produce_one_at_a_time(bootstrap, t, count),
        "pure": lambda t: produce_pure(bootstrap, t, count),
        "batches": lambda t: produce_batches(bootstrap, t, count),
        "pure-batches": lambda t: produce_pure(bootstrap, t, count, batches=True),
    }
    figures: dict[str, list[float]] = {name: [] for name in names}
    for n in range(rounds):
        order = names if n % 2 == 0 else names[1:] + names[:1]  # librdkafka first, then last
        for name in order:
            figures[name].append(runs[name](f"defaults-{name}-{n}"))
        print(f"round {n} (load {os.getloadavg()[0]:.1f}): "
              + ", ".join(f"{name} {figures[name][-1]:,.0f}" for name in names) + " msg/s",
              flush=True)
    theirs = figures["confluent"]
    rows = []
    for name, title, aim in (
            ("klog", "produce, both at defaults, 1 per call, 1 partition", "0.9x"),
            ("pure", "  the same, klog's pure-Python path", None),
            ("batches", "produce, klog send_batch of 50 at defaults", "2,000,000"),
            ("pure-batches", "  the same, klog's pure-Python path", None)):
        ratios = [ours / t for ours, t in zip(figures[name], theirs)]
        rows.append((f"{title} (median of {rounds})", statistics.median(figures[name]),
                     statistics.median(theirs), aim, statistics.median(ratios)))
    below = [n for n, (b, one) in enumerate(zip(figures["batches"], figures["klog"])) if b < one]
    print(f"send_batch of 50 below one send() per message in round(s): {below or 'none'}")
    return rows


def produce_confluent(bootstrap: str, topic: str, count: int, config=CONFLUENT) -> float:
    """librdkafka producing ``count`` messages, one produce() each (``config={}``: defaults)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **config})
    producer.produce(topic, VALUE)
    producer.flush(30)
    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(count):
        while True:
            try:
                produce(topic, VALUE)
                break
            except BufferError:  # its queue is full (100k messages by default): wait
                poll(0.01)
        if i % 10_000 == 0:
            poll(0)
    producer.flush(120)
    return count / (time.perf_counter() - start)


def consume_klog(bootstrap: str, topic: str, count: int) -> float:
    with klog.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=10_000) as consumer:
        consumer.assign([klog.TopicPartition(topic, p) for p in (0, 1)])
        for tp in consumer.assignment():
            consumer.position(tp)
        seen = 0
        total_bytes = 0
        start = time.perf_counter()
        for record in consumer:
            seen += 1
            total_bytes += len(record.value)
            if seen >= count:
                break
        elapsed = time.perf_counter() - start
        assert total_bytes == seen * len(VALUE)
        return seen / elapsed


CONSUME_ROUNDS = 3
UNTHROTTLED = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 0,
               "queued.max.messages.kbytes": 1_048_576}


def consume_confluent(bootstrap: str, topic: str, count: int, config=UNTHROTTLED) -> float:
    """librdkafka reading ``count`` messages from the beginning (``config={}``: its defaults).

    The clock starts before the first ``consume()``, as klog's starts before its first
    record is asked for: both include the first fetch, and every message counted is timed
    (it used to start after the first answer of up to 10,000 messages, which were counted
    but not timed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-assign-only",
                         "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    seen = total_bytes = 0
    start = time.perf_counter()
    while seen < count:
        messages = consumer.consume(10_000, timeout=10)
        if not messages:
            break
        for message in messages:
            total_bytes += len(message.value())
        seen += len(messages)
    elapsed = time.perf_counter() - start
    consumer.close()
    return seen / elapsed


def fill(bootstrap: str, topic: str, count: int) -> None:
    with klog.Producer(bootstrap_servers=bootstrap, **SAME) as producer:
        values = [VALUE] * 1000
        for i in range(count // 1000):
            producer.send_batch(topic, values, partition=i % 2)


def spy_on(title: str, run) -> None:
    """Sample every thread of this process with py-spy while ``run()`` runs; print the
    functions with the most samples of their own (lines folded into functions)."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        print(f"(py-spy not installed, no profile of {title}: pip install -e '.[test]')")
        return
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        sampler = subprocess.Popen([str(spy), "record", "-p", str(os.getpid()), "-r", "250",
                                    "-f", "raw", "-o", out.name],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached
        run()
        sampler.send_signal(signal.SIGINT)
        sampler.wait(30)
        own: Counter[str] = Counter()
        total = 0
        for line in Path(out.name).read_text().splitlines():
            stack, _, samples = line.rpartition(" ")
            frame = stack.split(";")[-1]
            name, _, where = frame.partition(" (")
            own[f"{name} ({where.rsplit(':', 1)[0]})"] += int(samples)
            total += int(samples)
    print(f"\n== {title}: py-spy, share of samples spent in each function itself")
    for frame, samples in own.most_common(14):
        print(f"  {100 * samples / max(total, 1):5.1f}%  {frame}")


def measure_consume(bootstrap: str, topic: str, count: int, rounds: int):
    """``rounds`` rounds on the filled ``topic``, each librdkafka (unthrottled, then at its
    defaults) and klog at its defaults in turn: ``(rates, cpu_us)``, each ``{reader: [one
    figure per round]}``. A round's order alternates, so neither client always reads after
    the other has warmed the page cache. ``cpu_us`` is the CPU time this process spent per
    message (every thread: librdkafka's own, and klog's one): on a machine shared with other
    work the wall-clock rates swing with the load, the CPU per message much less."""
    readers = {
        "klog": lambda: consume_klog(bootstrap, topic, count),
        "librdkafka unthrottled": lambda: consume_confluent(bootstrap, topic, count),
        "librdkafka defaults": lambda: consume_confluent(bootstrap, topic, count, {}),
    }
    rates: dict[str, list[float]] = {name: [] for name in readers}
    cpu_us: dict[str, list[float]] = {name: [] for name in readers}
    for round_ in range(rounds):
        order = list(readers) if round_ % 2 == 0 else list(readers)[::-1]
        for name in order:
            cpu0 = time.process_time()
            rates[name].append(readers[name]())
            cpu_us[name].append((time.process_time() - cpu0) * 1e6 / count)
        print(f"consume round {round_ + 1}: " + ", ".join(
            f"{name} {rates[name][-1]:,.0f} ({cpu_us[name][-1]:.2f} us CPU/msg)"
            for name in readers), flush=True)
    return rates, cpu_us


def print_consume(count: int, rates, cpu_us) -> None:
    """The medians of :func:`measure_consume`'s rounds, and of the per-round ratios."""
    ours = rates["klog"]
    print(f"\nconsume {count:,} messages of 200 B, {len(ours)} rounds, medians "
          f"({os.cpu_count()} cores)")
    for name, values in rates.items():
        line = (f"  {name:<24}{statistics.median(values):>12,.0f} msg/s"
                f"{statistics.median(cpu_us[name]):>7.2f} us CPU/msg")
        if name != "klog":
            ratios = [a / b for a, b in zip(ours, values)]
            line += (f"   klog/this: median {statistics.median(ratios):.2f}"
                     f" (min {min(ratios):.2f}, max {max(ratios):.2f})")
        print(line)


def consume_rounds(rounds: int, count: int) -> None:
    """The consume rows alone (``--consume-rounds``): an appliance, the topic filled once,
    :func:`measure_consume`, every round printed, then the medians."""
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=2,
                              settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            with klog.Admin(appliance.bootstrap) as admin:
                admin.create_topic("consume", 2)
            fill(appliance.bootstrap, "consume", count)
            rates, cpu_us = measure_consume(appliance.bootstrap, "consume", count, rounds)
        finally:
            appliance.stop()
    print_consume(count, rates, cpu_us)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--consume-rounds", type=int, default=0, metavar="N",
                        help="only the consume rows: N alternating rounds of each, medians")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of the at-defaults rows (their median)")
    parser.add_argument("--pure-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pure_child:
        pure_child(*args.pure_child)
        return
    if args.consume_rounds:
        consume_rounds(args.consume_rounds, 1_000_000 if args.quick else 3_000_000)
        return
    produce_count = 300_000 if args.quick else 2_000_000
    consume_count = 1_000_000 if args.quick else 10_000_000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=2,
                              settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            with klog.Admin(appliance.bootstrap) as admin:
                for name in ("one", "batch", "defaults", "java-batches", "confluent", "consume"):
                    admin.create_topic(name, 2)
            bs = appliance.bootstrap
            # several times buffer_memory (32 MiB: ~155k such records), so that the rate is
            # the steady one and not the buffer's filling (the independent harness's million)
            rows.extend(defaults_rounds(bs, args.rounds, 500_000 if args.quick else 1_000_000))
            pid = appliance.process.pid
            cpu0 = cpu_seconds(pid)
            theirs = produce_confluent(bs, "confluent", produce_count)
            cpu_theirs = cpu_seconds(pid) - cpu0
            cpu0 = cpu_seconds(pid)
            ours = produce_one_at_a_time(bs, "one", produce_count, **SAME)
            cpu_ours = cpu_seconds(pid) - cpu0
            rows.append(("produce, 1 message per send()", ours, theirs, 300_000))
            rows.append(("produce, send_batch of 50", produce_batches(bs, "batch", produce_count,
                                                                     **SAME), theirs, 1_000_000))
            rows.append(("produce, klog defaults (acks=all, idempotent, 1 MB)",
                         produce_one_at_a_time(bs, "defaults", produce_count // 2), theirs,
                         None))
            rows.append(("produce, klog defaults but Java's 16 KiB batches",
                         produce_one_at_a_time(bs, "java-batches", produce_count // 2,
                                               batch_size=16_384), theirs, None))
            fill(bs, "consume", consume_count)
            rates, cpu_us = measure_consume(bs, "consume", consume_count, CONSUME_ROUNDS)
            ours = statistics.median(rates["klog"])
            rows.append((f"consume {consume_count:,}, both at defaults (aim 1.0x)", ours,
                         statistics.median(rates["librdkafka defaults"]), None))
            rows.append((f"consume {consume_count:,}, librdkafka unthrottled", ours,
                         statistics.median(rates["librdkafka unthrottled"]), 1_000_000))
            print(f"broker CPU s per 100k msgs produced: klog {cpu_ours * 1e5 / produce_count:.2f}"
                  f", librdkafka {cpu_theirs * 1e5 / produce_count:.2f}")
            if args.profile:
                spy_on("klog consumer", lambda: consume_klog(bs, "consume", consume_count))
                spy_on("klog producer, one per send()",
                       lambda: produce_one_at_a_time(bs, "one", produce_count, **SAME))
                spy_on("klog producer, send_batch of 50",
                       lambda: produce_batches(bs, "batch", produce_count, **SAME))
        finally:
            appliance.stop()
    print_consume(consume_count, rates, cpu_us)
    print(f"\n200-byte messages, one client process, two-worker appliance, "
          f"{os.cpu_count()} cores")
    print(f"{'figure':<66}{'klog msg/s':>12}{'librdkafka':>12}{'ratio':>7}{'aim':>11}")
    for name, ours, theirs, aim, *ratio in rows:  # a row of rounds: its median ratio
        ratio = ratio[0] if ratio else ours / theirs
        aim = "" if aim is None else aim if isinstance(aim, str) else f"{aim:,}"
        print(f"{name:<66}{ours:>12,.0f}{theirs:>12,.0f}{ratio:>7.2f}{aim:>11}")


if __name__ == "__main__":
    main()
