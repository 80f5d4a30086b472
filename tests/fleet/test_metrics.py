"""Cluster-mode metrics of two appliances on one real ZooKeeper server: replication (a stalled
follower: its lag as its leader sees it, the ISR shrinking and expanding, the partition
under-replicated meanwhile, in the metrics and in `klog cluster status`), the session, which
one controls the fleet and its epoch, and partitions left without a leader when an appliance
stops; then ZooKeeper goes away and the session gauge says so."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

import klog
from tests.conftest import REPO, Appliance, free_port
from tests.fleet.zookeeper import Ensemble, unavailable_reason

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    zk = Ensemble(tmp_path_factory.mktemp("zk"), servers=1)
    try:
        zk.start()
        yield zk
    finally:
        zk.close()


@pytest.fixture(scope="module")
def fleet(zookeeper, tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet-metrics")
    appliances = []
    try:
        for broker_id in (1, 2):
            port = free_port()
            appliance = Appliance(root / f"a{broker_id}", settings={
                "broker.id": str(broker_id),
                "zookeeper.connect": f"{zookeeper.connect}/klog-metrics",
                "zookeeper.session.timeout.ms": "6000",
                "metrics.port": str(port),
                "replica.lag.time.max.ms": "3000",  # a stalled follower leaves the ISR soon
            })
            appliance.metrics_port = port
            appliance.start(timeout_s=60)
            appliances.append(appliance)
        yield appliances
    finally:
        for appliance in appliances:
            appliance.stop()


def samples(appliance) -> list:
    url = f"http://127.0.0.1:{appliance.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def gauges(appliance) -> dict[str, float]:
    return {s.name: s.value for s in samples(appliance) if not s.labels}


def summed(appliance, name: str, **labels) -> float:
    """The sum of a labelled series' samples (e.g. a counter over every worker)."""
    return sum(s.value for s in samples(appliance) if s.name == name
               and all(s.labels.get(k) == v for k, v in labels.items()))


def cluster_status(appliance, *flags) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status", "--config",
                           str(appliance.config), *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def wait_until(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_a_stalled_follower_in_the_metrics_and_cluster_status(fleet):
    """SIGSTOP of the follower's worker while records arrive: the leader's appliance shows
    the follower's lag, then (after replica.lag.time.max.ms) an ISR shrink and the partition
    under-replicated, as `klog cluster status` does; after SIGCONT an expansion and none."""
    with klog.Admin(fleet[0].bootstrap) as admin:
        admin.create_topic("mirrored", 1, replication_factor=2)
    state = wait_until(lambda: next((p for p in orjson.loads(cluster_status(
        fleet[0], "--json").stdout)["partition_states"] if p["topic"] == "mirrored"
        and len(p["isr"]) == 2), None))
    leader = fleet[state["leader"] // 100 - 1]
    follower = next(a for a in fleet if a is not leader)
    with klog.Producer(bootstrap_servers=leader.bootstrap, acks="all") as producer:
        for i in range(10):
            producer.send("mirrored", b"%d" % i)
    follower_node = next(r for r in state["replicas"] if r != state["leader"])
    lag = {"topic": "mirrored", "partition": "0", "follower": str(follower_node)}
    wait_until(lambda: any(s.name == "klog_follower_lag_messages" and s.labels == lag
                           and s.value == 0 for s in samples(leader)))
    shrinks = summed(leader, "klog_isr_shrinks_total")
    assert gauges(leader)["klog_under_replicated_partitions"] == 0
    pid = follower.worker_pid(0)
    os.kill(pid, signal.SIGSTOP)
    try:
        with klog.Producer(bootstrap_servers=leader.bootstrap, acks=1) as producer:
            for i in range(7):
                producer.send("mirrored", b"%d" % i)
        assert wait_until(lambda: summed(leader, "klog_follower_lag_messages", **lag) == 7)
        wait_until(lambda: gauges(leader)["klog_under_replicated_partitions"] == 1)
        # the worker publishes its counters twice a second: they may follow the gauge
        wait_until(lambda: summed(leader, "klog_isr_shrinks_total") == shrinks + 1)
        assert gauges(follower)["klog_under_replicated_partitions"] == 0  # it leads none
        status = orjson.loads(cluster_status(leader, "--json").stdout)
        assert "mirrored-0" in status["under_replicated_partitions"]
        row = next(p for p in status["partition_states"] if p["topic"] == "mirrored")
        assert row["isr"] == [state["leader"]] and row["problems"] == ["under-replicated"]
        assert row["leader_epoch"] == state["leader_epoch"]  # an ISR change is no election
        human = cluster_status(leader, "--problems").stdout
        assert "mirrored" in human and f"not in sync: {lag['follower']}" in human
        expands = summed(leader, "klog_isr_expands_total")
    finally:
        with contextlib.suppress(ProcessLookupError):  # replaced by the supervisor after
            os.kill(pid, signal.SIGCONT)  # worker.heartbeat.timeout.ms: the assertion speaks
    wait_until(lambda: gauges(leader)["klog_under_replicated_partitions"] == 0)
    wait_until(lambda: summed(leader, "klog_isr_expands_total") == expands + 1)
    wait_until(lambda: summed(leader, "klog_follower_lag_messages", **lag) == 0)


def test_followers_fetch_in_sessions_their_leaders_count(fleet):
    """The follower of `mirrored` (above) fetches in a KIP-227 session at its leader, which
    holds that one partition in it; the follower's appliance leads no replicated partition
    and keeps none."""
    state = orjson.loads(cluster_status(fleet[0], "--json").stdout)
    leader_node = next(p for p in state["partition_states"]
                       if p["topic"] == "mirrored")["leader"]
    leader = fleet[leader_node // 100 - 1]
    follower = next(a for a in fleet if a is not leader)
    wait_until(lambda: summed(leader, "klog_fetch_session_partitions") == 1)
    assert summed(leader, "klog_fetch_sessions") >= 1
    assert summed(follower, "klog_fetch_sessions") == 0
    assert summed(follower, "klog_fetch_session_partitions") == 0


def test_session_controller_and_offline_partitions(fleet, zookeeper):
    first, second = fleet
    views = wait_until(lambda: (lambda v: v if all(g.get("klog_zookeeper_connected") == 1
                                                   for g in v) else None)(
        [gauges(a) for a in fleet]))
    assert sorted(g["klog_controller_active"] for g in views) == [0, 1]
    assert views[0]["klog_controller_epoch"] == views[1]["klog_controller_epoch"] >= 1
    with klog.Admin(first.bootstrap) as admin:
        admin.create_topic("spread", 4)
    wait_until(lambda: all(gauges(a)["klog_offline_partitions"] == 0 for a in fleet))
    second.stop()  # its partitions (replication factor 1) lose their only leader
    offline = wait_until(lambda: gauges(first)["klog_offline_partitions"])
    assert 1 <= offline <= 4
    assert wait_until(lambda: gauges(first)["klog_controller_active"] == 1)
    zookeeper.close()  # and now ZooKeeper itself
    wait_until(lambda: gauges(first)["klog_zookeeper_connected"] == 0)
