"""Cluster-mode metrics of two appliances on one real ZooKeeper server: the session, which one
controls the fleet and its epoch, and partitions left without a leader when an appliance
stops; then ZooKeeper goes away and the session gauge says so."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import klog
from tests.conftest import Appliance, free_port
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
            })
            appliance.metrics_port = port
            appliance.start(timeout_s=60)
            appliances.append(appliance)
        yield appliances
    finally:
        for appliance in appliances:
            appliance.stop()


def gauges(appliance) -> dict[str, float]:
    url = f"http://127.0.0.1:{appliance.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.labels}


def wait_until(predicate, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


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
