"""Crashes while an hour is loaded: nothing partial becomes visible, and the next run
completes the hour with exactly its rows. One real ``kill -9`` of `klog load-hourly` (and its
Spark) in the middle of writing; the windows between the publishing steps through named
fault points (`klog_pipeline.faults`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import klog
from klog_pipeline.faults import VARIABLE, FaultInjected
from klog_pipeline.hours import Hour
from tests.conftest import REPO
from tests.pipeline.clicks import checksum, produce_hours
from tests.pipeline.tables import ledger, rows_by_hour

pytestmark = pytest.mark.slow


def past_hour(hours_ago: int) -> Hour:
    return Hour(Hour.containing(int(time.time() * 1000)).index - hours_ago)


def test_kill_9_while_writing_leaves_nothing_visible_and_the_rerun_completes(
        spark, broker, topic_factory, load_hourly, tmp_path):
    topic, warehouse = topic_factory(6), tmp_path / "warehouse"
    hour = past_hour(40)
    produced = produce_hours(broker.bootstrap, topic, {hour: 3000})[hour]
    staging = warehouse / "_staging" / topic
    loader = subprocess.Popen(
        [sys.executable, "-m", "klog_cli.main", "load-hourly", "-b", broker.bootstrap, "-t", topic,
         "--hour", hour.label, "--warehouse", str(warehouse), "--master", "local[2]",
         "--now", str(hour.end_ms + 61_000)],
        cwd=REPO, env={**os.environ, VARIABLE: "task-done:sleep=120"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(staging.glob("*/events/*.parquet")):  # some tasks' files are written
            assert loader.poll() is None, loader.stdout.read().decode()
            assert time.monotonic() < deadline, "the loader never started writing"
            time.sleep(0.1)
    finally:
        os.killpg(loader.pid, signal.SIGKILL)  # the loader, its JVM and the Python workers
        loader.wait(30)
    assert list(staging.glob("*/events/*.parquet")), "killed before writing"
    assert not (warehouse / topic).exists()
    assert rows_by_hour(spark, warehouse / topic) == {}
    assert hour.label not in ledger(warehouse, topic)["hours"]

    status, out = load_hourly(topic, warehouse, "--hour", hour.label, now=hour)
    assert status == 0, out
    rows = rows_by_hour(spark, warehouse / topic)[hour]
    assert len(rows) == 3000 and checksum(rows) == checksum(produced)
    assert ledger(warehouse, topic)["hours"][hour.label]["state"] == "loaded"
    assert not staging.exists() or not any(staging.iterdir())


@pytest.mark.parametrize("point", ["after-stage", "between-renames", "before-ledger"])
def test_a_crash_between_publishing_steps_is_repaired_by_the_next_run(
        spark, broker, topic_factory, load_hourly, tmp_path, monkeypatch, point):
    topic, warehouse = topic_factory(3), tmp_path / "warehouse"
    hour = past_hour(50)
    produced = produce_hours(broker.bootstrap, topic, {hour: 90}, partitions=3)[hour]
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        producer.send(topic, b"{broken", partition=0, timestamp_ms=hour.start_ms + 1)
    monkeypatch.setenv(VARIABLE, f"{point}:raise")
    with pytest.raises(FaultInjected):
        load_hourly(topic, warehouse, "--hour", hour.label, now=hour)
    monkeypatch.delenv(VARIABLE)
    assert hour.label not in ledger(warehouse, topic)["hours"]
    visible = rows_by_hour(spark, warehouse / topic)
    if point == "before-ledger":  # whole, but not claimed: the rerun replaces it
        assert len(visible[hour]) == 90
    else:
        assert visible == {}

    status, out = load_hourly(topic, warehouse, "--hour", hour.label, now=hour)
    assert status == 0, out
    rows = rows_by_hour(spark, warehouse / topic)[hour]
    assert len(rows) == 90 and checksum(rows) == checksum(produced)
    assert len(rows_by_hour(spark, warehouse / "_rejects" / topic)[hour]) == 1
    assert ledger(warehouse, topic)["hours"][hour.label]["state"] == "loaded"


def test_a_crash_during_a_reload_is_finished_by_a_plain_rerun(
        spark, broker, topic_factory, load_hourly, tmp_path, monkeypatch):
    topic, warehouse = topic_factory(2), tmp_path / "warehouse"
    hour = past_hour(60)
    produced = produce_hours(broker.bootstrap, topic, {hour: 50}, partitions=2)[hour]
    assert load_hourly(topic, warehouse, "--hour", hour.label, now=hour)[0] == 0
    monkeypatch.setenv(VARIABLE, "between-renames:raise")
    with pytest.raises(FaultInjected):
        load_hourly(topic, warehouse, "--hour", hour.label, "--reload", now=hour)
    monkeypatch.delenv(VARIABLE)
    assert ledger(warehouse, topic)["hours"][hour.label]["state"] == "reloading"
    status, out = load_hourly(topic, warehouse, "--hour", hour.label, now=hour)
    assert status == 0, out
    rows = rows_by_hour(spark, warehouse / topic)[hour]
    assert len(rows) == 50 and checksum(rows) == checksum(produced)
    assert ledger(warehouse, topic)["hours"][hour.label]["state"] == "loaded"
