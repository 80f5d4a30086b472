"""A worker protects itself from misbehaving clients: connections.max.idle.ms closes idle and
half-sent connections, max.connections and max.connections.per.ip refuse the excess, and a
well-behaved client (klog's own) is served throughout while the worker's memory stays bounded.

The loopback network is all of 127.0.0.0/8, so "other hosts" are other source addresses.
"""

from __future__ import annotations

import resource
import select
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import klog
from tests.conftest import Appliance, free_port

HALF_OPEN = 2000
IDLE_MS = 1500


@pytest.fixture(scope="module", autouse=True)
def enough_descriptors():
    """2000 client sockets here and 2000 accepted ones in the worker (which inherits this)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 3 * HALF_OPEN + 1024) if hard != resource.RLIM_INFINITY else 8192
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the broker closed this socket (EOF or reset); never blocks."""
    poller = select.poll()  # select() cannot take descriptors above 1023
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


class SteadyClient:
    """A well-behaved producer sending one record every 20 ms, recording any failure."""

    def __init__(self, bootstrap: str, topic: str):
        self.producer = klog.Producer(bootstrap_servers=bootstrap, linger_ms=0)
        self.topic = topic
        self.sent = 0
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.producer.send(self.topic, b"%d" % self.sent).result(timeout=10)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 (the test reports it)
                self.failures.append(exc)
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self.producer.close()


def worker_counter(port: int, name: str) -> float:
    """A counter of worker 0 as the appliance's metrics endpoint shows it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{worker="0"}} '):
            return float(line.split()[1])
    return -1.0


def wait_for_counter(port: int, name: str, expected: float) -> float:
    """Workers publish their statistics twice a second: wait for the figure to arrive."""
    deadline = time.monotonic() + 30
    while (value := worker_counter(port, name)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def consume_all(bootstrap: str, topic: str, expected: int) -> int:
    consumer = klog.Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([klog.TopicPartition(topic, 0)])
    seen, deadline = 0, time.monotonic() + 60
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_half_open_connections_are_closed_after_the_idle_timeout(tmp_path):
    metrics = free_port()
    appliance = Appliance(tmp_path, settings={"connections.max.idle.ms": str(IDLE_MS),
                                              "metrics.port": str(metrics)}).start()
    try:
        with klog.Admin(appliance.bootstrap) as admin:
            admin.create_topic("steady", 1)
        worker = appliance.worker_pid(0)
        rss_before = rss_bytes(worker)
        with SteadyClient(appliance.bootstrap, "steady") as client:
            hostile = []
            for _ in range(HALF_OPEN):
                sock = connect_from("127.0.0.2", appliance.port)
                sock.sendall(b"\x00\x00")  # two bytes of a size prefix, then silence
                hostile.append(sock)
            opened_at = time.monotonic()
            rss_held = rss_bytes(worker)
            deadline = time.monotonic() + 60
            open_ones = hostile
            while open_ones and time.monotonic() < deadline:
                open_ones = [s for s in open_ones if not closed_by_peer(s)]
                time.sleep(0.1)
            closed_after = time.monotonic() - opened_at
            sent_during = client.sent
            for sock in hostile:
                sock.close()
            time.sleep(0.5)
        assert not open_ones, f"{len(open_ones)} half-open connections still open"
        assert closed_after >= IDLE_MS / 1000 * 0.5, "closed before they were idle long"
        assert not client.failures, client.failures[:3]
        assert sent_during > 10, "the well-behaved client was starved"
        assert consume_all(appliance.bootstrap, "steady", client.sent) == client.sent
        # 2000 connections cost the worker a few MB, not a buffer each
        assert rss_held - rss_before < 64 * 1024 * 1024, (rss_before, rss_held)
        idle_closed = wait_for_counter(metrics, "klog_connections_idle_closed_total", HALF_OPEN)
        assert idle_closed >= HALF_OPEN
        assert appliance.process.poll() is None
    finally:
        appliance.stop()


@pytest.mark.slow
def test_connections_over_the_limits_are_refused(tmp_path):
    metrics = free_port()
    appliance = Appliance(tmp_path, settings={"max.connections": "60",
                                              "max.connections.per.ip": "25",
                                              "metrics.port": str(metrics)}).start()
    try:
        with klog.Admin(appliance.bootstrap) as admin:
            admin.create_topic("steady", 1)
        with SteadyClient(appliance.bootstrap, "steady") as client:
            while client.sent < 3:  # its connections are made before the flood
                time.sleep(0.05)
            # per address: 25 of 40 from 127.0.0.2 are admitted
            noisy = [connect_from("127.0.0.2", appliance.port) for _ in range(40)]
            time.sleep(1.0)
            refused = [s for s in noisy if closed_by_peer(s)]
            assert len(refused) == 15
            # in total: the client's connection(s) + 25 + up to 60 overall
            others = [connect_from(f"127.0.0.{3 + i // 20}", appliance.port)
                      for i in range(60)]
            time.sleep(1.0)
            admitted = [s for s in others if not closed_by_peer(s)]
            kept = 25 + len(admitted)
            assert 55 <= kept <= 59, kept  # 60 minus the client's own connection(s)
            refused_count = 15 + 60 - len(admitted)
            assert wait_for_counter(metrics, "klog_connections_refused_total",
                                    refused_count) == refused_count
            # a freed slot is usable again
            next(s for s in noisy if s not in refused).close()
            time.sleep(0.5)
            again = connect_from("127.0.0.2", appliance.port)
            time.sleep(0.5)
            assert not closed_by_peer(again)
            noisy.append(again)
            sent_before = client.sent
            deadline = time.monotonic() + 30
            while client.sent < sent_before + 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert client.sent >= sent_before + 10, "the client was not served during the flood"
            for sock in noisy + others:
                sock.close()
        assert not client.failures, client.failures[:3]
        assert appliance.process.poll() is None
    finally:
        appliance.stop()
