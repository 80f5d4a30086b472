"""Client quotas enforced, seen by librdkafka: a client id with producer_byte_rate 1 MB/s,
producing as fast as it can beside an unthrottled client id on the same worker, is held to
1 MB/s ± 10 % over 30 s (measured after the first windows: Kafka's rate lets the first
(quota.window.num - 1) windows' worth through at once), the other (sending at 10 MB/s, so
the test does not fill the disk at whatever speed it has) is never throttled and keeps its
rate, and librdkafka's throttle_cb and statistics report the throttle times
it was given. Then a consumer with consumer_byte_rate reads at its quota.

This module takes about 65 s (the acceptance's 30 s measure, its 12 s warm-up, the consumer)."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from klog.admin import Admin
from klog.protocol.apis import alter_client_quotas as alter
from tests.conftest import free_port, running_appliance, topic_maker
from tests.polling import wait_until

QUOTA = 1_048_576
WARMUP_S = 12  # quota.window.num (11) windows of 1 s, and one more
MEASURE_S = 30
FREE_RATE = 10 * QUOTA  # the unthrottled client's own pace, which it must keep
VALUE = b"x" * 10_000


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    metrics_port = free_port()
    with running_appliance(tmp_path_factory.mktemp("quotas_throttle"), log_dirs=1,
                           settings={"metrics.port": str(metrics_port)}) as started:
        started.metrics_port = metrics_port
        yield started


def _throttle_metrics(appliance) -> dict:
    url = f"http://127.0.0.1:{appliance.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, s.labels["quota_type"], s.labels["client_id"]): s.value
            for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("klog_client_throttle")}


def _set_quota(bootstrap, entity_type, name, key, value):
    with Admin(bootstrap) as admin:
        answer = admin.request(alter, validate_only=False, entries=[alter.RequestEntry(
            entity=[alter.EntityData(entity_type=entity_type, entity_name=name)],
            ops=[alter.OpData(key=key, value=float(value), remove=False)])])
    assert [e.error_code for e in answer.entries] == [0]


class Flood:
    """One producer sending as fast as librdkafka lets it, in its own thread; what it got
    acknowledged, when, and the throttle times it was told."""

    def __init__(self, bootstrap, topic, client_id, pace=None):
        self.topic = topic
        self.pace = pace  # bytes per second to send at (None: as fast as it can)
        self.delivered: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.stats_throttle_max = 0
        self.errors: list = []
        self._stop = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1,
            "linger.ms": 5, "queue.buffering.max.kbytes": 16384,
            "statistics.interval.ms": 1000, "stats_cb": self._stats,
            "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _stats(self, text):
        import json
        for broker in json.loads(text).get("brokers", {}).values():
            self.stats_throttle_max = max(self.stats_throttle_max,
                                          broker.get("throttle", {}).get("max", 0))

    def _on_delivery(self, err, msg):
        if err is not None:
            if not self._stop.is_set():  # purged when stopped: not an error of the test
                self.errors.append(err)
        else:
            self.delivered.append((time.monotonic(), len(msg.value())))

    def _run(self):
        began, sent = time.monotonic(), 0
        while not self._stop.is_set():
            if self.pace is not None and sent > self.pace * (time.monotonic() - began):
                self.producer.poll(0.002)
                continue
            sent += len(VALUE)
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=self._on_delivery)
            except BufferError:
                self.producer.poll(0.05)
            else:
                self.producer.poll(0)
        self.producer.poll(0)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self._stop.set()
        self.thread.join()
        self.producer.purge(in_queue=True, in_flight=False)  # a throttled queue drains slowly
        self.producer.flush(30)
        self.producer = None  # its callbacks hold this object: let it close now

    def rate(self, start, end):
        return sum(n for t, n in self.delivered if start <= t < end) / (end - start)


def test_producer_held_to_its_quota_beside_a_free_one(appliance):
    make = topic_maker(appliance.bootstrap)
    _set_quota(appliance.bootstrap, "client-id", "throttled", "producer_byte_rate", QUOTA)
    held = Flood(appliance.bootstrap, make(1, "held"), "throttled").start()
    free = Flood(appliance.bootstrap, make(1, "free"), "unthrottled", pace=FREE_RATE).start()
    began = time.monotonic()
    time.sleep(WARMUP_S + MEASURE_S)
    held.stop()
    free.stop()
    start = began + WARMUP_S
    held_rate = held.rate(start, start + MEASURE_S)
    free_rate = free.rate(start, start + MEASURE_S)
    print(f"held {held_rate / QUOTA:.3f} of its quota, free {free_rate / FREE_RATE:.3f} of its "
          f"pace, "
          f"throttle_cb {len(held.throttles)} times (max {max(held.throttles, default=0)} s),"
          f" stats max {held.stats_throttle_max} ms")
    assert not held.errors and not free.errors
    assert 0.9 * QUOTA <= held_rate <= 1.1 * QUOTA, held_rate
    assert held.throttles and max(held.throttles) > 0
    assert held.stats_throttle_max > 0
    assert not free.throttles
    assert free_rate >= 0.9 * FREE_RATE, free_rate
    # the Prometheus exporter shows the throttling of that client id, and only of it
    metrics = wait_until(lambda: _throttle_metrics(appliance) or None, 5, "throttle metrics")
    assert metrics[("klog_client_throttled_total", "produce", "throttled")] >= len(
        held.throttles) * 0.5
    assert metrics[("klog_client_throttle_seconds_total", "produce", "throttled")] > 1
    assert not [k for k in metrics if k[2] == "unthrottled"]


def test_consumer_held_to_its_quota(appliance):
    make = topic_maker(appliance.bootstrap)
    topic = make(1, "read")
    count = 350  # 3.5 MB
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 5})
    for _ in range(count):
        producer.produce(topic, VALUE)
        producer.poll(0)
    producer.flush(30)
    rate = 200_000
    _set_quota(appliance.bootstrap, "client-id", "slow-reader", "consumer_byte_rate", rate)
    throttles = []
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "slow",
                         "client.id": "slow-reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and len(got) < count:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((time.monotonic(), len(msg.value())))
    consumer.close()
    assert len(got) == count
    total = sum(n for _, n in got)
    elapsed = got[-1][0] - got[0][0]
    # Kafka's rate lets (num - 1) windows' worth through first (and a fetch asks no more
    # than that); the rest comes at the quota
    least = (total - 10 * rate) / rate
    print(f"consumer read {total / 1e6:.1f} MB in {elapsed:.1f} s (quota: >= {least:.1f} s), "
          f"throttled {len(throttles)} times")
    assert throttles and max(throttles) > 0
    assert elapsed >= 0.85 * least, elapsed
    assert elapsed <= 1.5 * least + 5, elapsed
