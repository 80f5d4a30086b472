"""What metrics cost: produce and fetch throughput with metrics on and off, in the same run.

Two appliances of one worker each on the same disk: one without `metrics.port` (requests are
not counted at all) and one with it, scraped every second by a thread of this process as
Prometheus would. The measurements alternate between the two, round after round, so drift of
the machine (other tests, page cache) hits both alike; each figure is the median of its rounds.

- produce, small requests: pipelined Produce v8 (acks=1, 8 in flight) of 10-record batches:
  where per-request accounting weighs most;
- produce, large requests: the same with 4,900-record (~1 MiB) batches: MB/s;
- fetch: Fetch v11 of the large topic from the start, 1 MiB per partition per request: MB/s.

Throughput on a shared machine swings by a factor of two between identical appliances, so the
worker's CPU time per unit of work (from /proc/<pid>/schedstat, blind to other processes' load)
is printed too, and so is the one thing metrics add to a request's path, timed alone: the
worker's `request_done` accounting, on and off.

Run: .venv/bin/python perf/bench_metrics.py [--quick]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from klog.admin import Admin  # noqa: E402
from klog.protocol.apis import fetch, produce  # noqa: E402
from klog.protocol.client import NEED_DATA, ClientConnection  # noqa: E402
from klog.protocol.records import build_batch  # noqa: E402
from tests.conftest import Appliance, free_port  # noqa: E402

MB = 1_000_000


def cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread, in ns precision (/proc/<pid>/schedstat); the
    group-commit thread is idle with acks=1."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


class Pipeline:
    """One connection sending requests with up to `in_flight` unanswered."""

    def __init__(self, port: int, in_flight: int = 8):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.codec = ClientConnection(client_id="bench-metrics", max_frame_bytes=256 << 20)
        self.in_flight = in_flight

    def run(self, requests, answer) -> None:
        """Send every (api module, version, body) of `requests`; `answer(body)` per response."""
        sent = answered = 0
        pending = iter(requests)
        exhausted = False
        while not exhausted or answered < sent:
            while not exhausted and sent - answered < self.in_flight:
                item = next(pending, None)
                if item is None:
                    exhausted = True
                    break
                module, version, body = item
                self.sock.sendall(self.codec.send_request(module.SPEC.key, version, body)[1])
                sent += 1
            if answered == sent:
                continue
            event = self.codec.next_response()
            if event is NEED_DATA:
                self.codec.receive_data(self.sock.recv(1 << 20))
                continue
            answer(event[1])
            answered += 1

    def close(self) -> None:
        self.sock.close()


def produce_requests(topic: str, batch, count: int):
    for i in range(count):
        data = produce.PartitionProduceData(index=i % 2, records=batch)
        yield produce, 8, produce.Request(
            transactional_id=None, acks=1, timeout_ms=5000,
            topic_data=[produce.TopicProduceData(name=topic, partition_data=[data])])


def check_produced(body) -> None:
    for topic in body.responses:
        for part in topic.partition_responses:
            assert part.error_code == 0, part


def bench_produce(port: int, topic: str, records_per_batch: int, requests: int):
    batch = build_batch([(int(time.time() * 1000), None, b"x" * 200, [])] * records_per_batch)
    pipeline = Pipeline(port)
    start = time.perf_counter()
    pipeline.run(produce_requests(topic, batch, requests), check_produced)
    elapsed = time.perf_counter() - start
    pipeline.close()
    return requests / elapsed, requests * records_per_batch * 200 / MB / elapsed


def bench_fetch(port: int, topic: str, ends: dict[int, int]) -> float:
    """MB/s of record bytes fetched from offset 0 to `ends` (one request at a time)."""
    from klog.protocol.record_batch import scan_batches

    offsets = dict.fromkeys(ends, 0)
    pipeline = Pipeline(port, in_flight=1)
    total = 0

    def answer(body):
        nonlocal total
        for part in body.responses[0].partitions:
            if part.records:
                total += len(part.records)
                last = None
                for _, header in scan_batches(part.records, verify_crc=False):
                    last = header
                offsets[part.partition_index] = last.next_offset

    def requests():
        while any(offsets[p] < ends[p] for p in ends):
            yield fetch, 11, fetch.Request(
                replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=4 << 20,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[fetch.FetchTopic(topic=topic, partitions=[
                    fetch.FetchPartition(partition=p, current_leader_epoch=-1,
                                         fetch_offset=offsets[p], log_start_offset=-1,
                                         partition_max_bytes=1 << 20)
                    for p in ends if offsets[p] < ends[p]])],
                forgotten_topics_data=[], rack_id="")

    start = time.perf_counter()
    pipeline.run(requests(), answer)
    elapsed = time.perf_counter() - start
    pipeline.close()
    return total / MB / elapsed


class Scraper:
    """Scrapes /metrics every second, as Prometheus would, while the benchmark runs."""

    def __init__(self, port: int):
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(1.0):
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                answer.read()
            self.scrapes += 1

    def stop(self):
        self._stop.set()
        self._thread.join(15)


def accounting_us() -> tuple[float, float]:
    """µs per call of WorkerStatistics.request_done for a Produce request, on and off."""
    import timeit

    from appliance.workers.statistics import WorkerStatistics
    from klog.protocol.server import parse_request

    batch = build_batch([(0, None, b"x" * 200, [])] * 10)
    body = next(produce_requests("t", batch, 1))[2]
    _, data = ClientConnection(client_id="bench").send_request(produce.SPEC.key, 8, body)
    request = parse_request(memoryview(data)[4:])
    figures = []
    for statistics_ in (WorkerStatistics(), WorkerStatistics(enabled=False)):
        calls = 200_000
        seconds = min(timeit.repeat(lambda s=statistics_: s.request_done(request, 0.001, False),
                                    number=calls, repeat=3))
        figures.append(seconds / calls * 1e6)
    return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    small_requests = 3000 if args.quick else 20_000
    large_requests = 80 if args.quick else 200
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"log.segment.bytes": str(1 << 30)}
        off = Appliance(Path(tmp) / "off", settings=settings)
        on = Appliance(Path(tmp) / "on", settings={**settings, "metrics.port": str(free_port())})
        scraper = None
        try:
            off.start()
            on.start()
            scraper = Scraper(int(on.config.read_text().split("metrics.port=")[1].split()[0]))
            for appliance in (off, on):
                with Admin(appliance.bootstrap) as admin:
                    admin.create_topic("small", 2)
                    admin.create_topic("large", 2)
            for round_ in range(rounds):
                for label, appliance in (("off", off), ("on", on))[::1 if round_ % 2 else -1]:
                    figures = results.setdefault(label, {})
                    pid = appliance.worker_pid(0)
                    cpu = cpu_seconds(pid)
                    req_s, _ = bench_produce(appliance.port, "small", 10, small_requests)
                    figures.setdefault("small", []).append(req_s)
                    figures.setdefault("small_cpu", []).append(
                        (cpu_seconds(pid) - cpu) / small_requests * 1e6)
                    cpu = cpu_seconds(pid)
                    _, mb_s = bench_produce(appliance.port, "large", 4900, large_requests)
                    figures.setdefault("large", []).append(mb_s)
                    figures.setdefault("large_cpu", []).append(
                        (cpu_seconds(pid) - cpu) / (large_requests * 4900 * 200 / 1e9))
                    with Admin(appliance.bootstrap) as admin:
                        ends = admin.list_offsets("large")
                    cpu = cpu_seconds(pid)
                    figures.setdefault("fetch", []).append(
                        bench_fetch(appliance.port, "large", ends))
                    fetched_gb = sum(ends.values()) * 200 / 1e9  # values; batches add ~1%
                    figures.setdefault("fetch_cpu", []).append(
                        (cpu_seconds(pid) - cpu) / fetched_gb)
        finally:
            if scraper is not None:
                scraper.stop()
            on.stop()
            off.stop()
    title = f"figure (median of {rounds} rounds)"
    print(f"{title:<44}{'metrics on':>16}{'off (baseline)':>16}{'cost':>8}")
    for key, name, unit, more_is_better in (
            ("small", "produce, 10-record requests, acks=1", "req/s", True),
            ("small_cpu", "  worker CPU per request", "us", False),
            ("large", "produce, ~1 MiB requests, acks=1", "MB/s", True),
            ("large_cpu", "  worker CPU per GB produced", "s", False),
            ("fetch", "fetch from the start, 1 MiB/partition", "MB/s", True),
            ("fetch_cpu", "  worker CPU per GB fetched", "s", False)):
        with_metrics = statistics.median(results["on"][key])
        without = statistics.median(results["off"][key])
        cost = (without - with_metrics) / without * 100
        if not more_is_better:
            cost = -cost
        print(f"{name:<44}{with_metrics:>10,.1f} {unit:<5}{without:>10,.1f} {unit:<5}"
              f"{cost:>7.1f}%")
    on_us, off_us = accounting_us()
    per_request = statistics.median(results["off"]["small_cpu"])
    print(f"{'request accounting per request':<44}{on_us:>10,.2f} us   {off_us:>10,.2f} us   "
          f"{(on_us - off_us) / per_request * 100:>6.1f}% of a small request's worker CPU")
    print(f"(scrapes of the metrics endpoint during the run: {scraper.scrapes})")


if __name__ == "__main__":
    main()
