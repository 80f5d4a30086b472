"""A real Prometheus scrapes a real appliance: produce counters advance under load, the lag of a
group that stopped reading shows, a killed worker shows as down; every metric the README lists
exists after one produce, fetch and group round trip; the alert rules pass promtool.

One appliance (two workers, restarts delayed so a killed worker stays down) and one Prometheus
(scraping every second) serve the whole module; the kill comes last.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import klog
from tests.conftest import REPO, Appliance, free_port

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="Debian's prometheus package is not installed")


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    metrics_port = free_port()
    started = Appliance(tmp_path_factory.mktemp("metrics"), log_dirs=2, settings={
        "metrics.port": str(metrics_port),
        "group.initial.rebalance.delay.ms": "0",
        "worker.restart.backoff.ms": "60000",  # a killed worker stays down for the test
    })
    started.metrics_port = metrics_port
    started.start()
    try:
        yield started
    finally:
        started.stop()


class Prometheus:
    def __init__(self, workdir, target: str):
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: klog\n    static_configs:\n"
            f"      - targets: ['{target}']\n")
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 (open while it runs)
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not self._ready():
            assert self.process.poll() is None, (workdir / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def query(self, expr: str) -> list[tuple[dict, float]]:
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = orjson.loads(answer.read())
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def wait_for(self, expr: str, predicate, timeout_s: float = 60.0):
        """The query's result once `predicate(result)` holds (scrapes come every second)."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            assert time.monotonic() < deadline, f"{expr}: {result}"
            time.sleep(0.5)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def prometheus(appliance, tmp_path_factory):
    started = Prometheus(tmp_path_factory.mktemp("prometheus"),
                         f"127.0.0.1:{appliance.metrics_port}")
    try:
        yield started
    finally:
        started.stop()


def scrape(appliance) -> str:
    url = f"http://127.0.0.1:{appliance.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def produce(appliance, topic: str, count: int, *, acks="all") -> None:
    with klog.Producer(bootstrap_servers=appliance.bootstrap, acks=acks) as producer:
        for i in range(count):
            producer.send(topic, b"record %d" % i, key=b"%d" % i)
        producer.flush()


def consume_and_commit(appliance, topic: str, group: str, count: int, commit_at: int) -> None:
    consumer = klog.Consumer(bootstrap_servers=appliance.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([topic])
    read, deadline = 0, time.monotonic() + 60
    try:
        while read < count and time.monotonic() < deadline:
            read += sum(len(v) for v in consumer.poll(200).values())
        assert read == count
        consumer.commit({klog.TopicPartition(topic, 0): klog.OffsetAndMetadata(commit_at, "")})
    finally:
        consumer.close()


def test_produce_counters_advance_under_load(appliance, prometheus):
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic("load", 2)
    stop = threading.Event()
    sent = [0]

    def load():
        with klog.Producer(bootstrap_servers=appliance.bootstrap, acks=1, linger_ms=5) as p:
            while not stop.is_set():
                p.send_batch("load", [b"x" * 200] * 50)
                sent[0] += 50
                time.sleep(0.01)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        first = prometheus.wait_for('klog_topic_messages_in_total{topic="load"}',
                                    lambda r: r and r[0][1] > 0)[0][1]
        prometheus.wait_for('klog_topic_messages_in_total{topic="load"}',
                            lambda r: r and r[0][1] > first)
        prometheus.wait_for('sum(rate(klog_requests_total{api="Produce"}[5s]))',
                            lambda r: r and r[0][1] > 0)
        prometheus.wait_for('sum(rate(klog_topic_bytes_in_total{topic="load"}[5s]))',
                            lambda r: r and r[0][1] > 0)
        prometheus.wait_for('sum(klog_request_latency_seconds_count{api="Produce",acks="1"})',
                            lambda r: r and r[0][1] > 0)
    finally:
        stop.set()
        loader.join(30)
    total = prometheus.wait_for('klog_topic_messages_in_total{topic="load"}',
                                lambda r: r and r[0][1] == sent[0])
    assert total[0][1] == sent[0]


def test_the_lag_of_a_group_that_stopped_reading(appliance, prometheus):
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic("lagging", 1)
    produce(appliance, "lagging", 40)
    consume_and_commit(appliance, "lagging", "stopped-readers", 40, commit_at=30)
    prometheus.wait_for('klog_consumer_group_lag{group="stopped-readers",topic="lagging"}',
                        lambda r: r and r[0][1] == 10)
    produce(appliance, "lagging", 25)  # nobody reads them: the lag grows
    result = prometheus.wait_for(
        'klog_consumer_group_lag{group="stopped-readers",topic="lagging",partition="0"}',
        lambda r: r and r[0][1] == 35)
    assert result[0][0]["instance"] == f"127.0.0.1:{appliance.metrics_port}"


def readme_metrics() -> dict[str, str]:
    """Name -> meaning, from the README's metrics table."""
    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `(klog_[a-z_]+)` \| (\w+) \|[^|]*\| (.*) \|$", text, re.MULTILINE)
    assert len(rows) >= 25, rows
    return {name: meaning for name, _, meaning in rows}


def test_every_metric_in_the_readme_exists_after_a_round_trip(appliance):
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic("round-trip", 1)
    produce(appliance, "round-trip", 10)
    consume_and_commit(appliance, "round-trip", "round-trippers", 10, commit_at=10)
    documented = readme_metrics()
    expected = {n for n, meaning in documented.items()
                if not meaning.startswith(("cluster mode", "compacted topics",
                                                   "client quotas"))}
    deadline = time.monotonic() + 30
    while True:  # workers publish twice a second: wait for the group's report
        families = list(text_string_to_metric_families(scrape(appliance)))
        samples = {s.name for f in families for s in f.samples}
        exported = {re.sub(r"_(bucket|count|sum)$", "", s) for s in samples} | samples
        missing = expected - exported
        lag = [s for f in families for s in f.samples if s.name == "klog_consumer_group_lag"
               and s.labels.get("group") == "round-trippers"]
        if (not missing and lag) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not missing, sorted(missing)
    ours = {f.name + ("_total" if f.type == "counter" else "") for f in families
            if f.name.startswith("klog_")}
    assert ours <= set(documented), sorted(ours - set(documented))
    lag = [s for f in families for s in f.samples if s.name == "klog_consumer_group_lag"
           and s.labels.get("group") == "round-trippers"]
    assert lag and lag[0].value == 0
    # histograms: cumulative buckets, +Inf equal to the count (Produce acks=all went through)
    latency = next(f for f in families if f.name == "klog_request_latency_seconds")
    workers = {s.labels["worker"] for s in latency.samples if s.labels.get("api") == "Produce"
               and s.labels.get("acks") == "all"}
    assert workers
    for worker in workers:
        series = [s for s in latency.samples if s.labels.get("api") == "Produce"
                  and s.labels.get("acks") == "all" and s.labels["worker"] == worker]
        buckets = [s.value for s in series if s.name.endswith("_bucket")]
        count = next(s.value for s in series if s.name.endswith("_count"))
        assert buckets == sorted(buckets) and buckets[-1] == count > 0
    syncs = next(f for f in families if f.name == "klog_group_commit_batch_size")
    assert sum(s.value for s in syncs.samples if s.name.endswith("_count")) > 0


def test_alert_rules_pass_promtool():
    for command in (["promtool", "check", "rules", "prometheus-alerts.yml"],
                    ["promtool", "test", "rules", "prometheus-alerts.test.yml"]):
        result = subprocess.run(command, cwd=REPO / "ops", capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    dashboard = orjson.loads((REPO / "ops" / "grafana-dashboard.json").read_bytes())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    named = set(re.findall(r"klog_[a-z_]+", exprs))
    known = set(readme_metrics())
    assert {re.sub(r"_(bucket|count|sum)$", "", n) for n in named} <= known


def test_a_killed_worker_shows_as_down(appliance, prometheus):  # last: it stays down
    prometheus.wait_for('klog_worker_up{worker="1"}', lambda r: r and r[0][1] == 1)
    os.kill(appliance.worker_pid(1), signal.SIGKILL)
    prometheus.wait_for('klog_worker_up{worker="1"}', lambda r: r and r[0][1] == 0)
    prometheus.wait_for('klog_worker_up{worker="0"}', lambda r: r and r[0][1] == 1)


def test_a_metrics_port_in_use_stops_start_up_naming_the_key(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        appliance = Appliance(tmp_path, settings={"metrics.port": str(port)})
        with pytest.raises(RuntimeError, match=r"metrics\.port: cannot listen on 127\.0\.0\.1"):
            appliance.start()
    assert appliance.process.wait(10) == 1
