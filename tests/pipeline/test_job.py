"""The spark-submit job file takes `klog load-hourly`'s options and loads the same way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klog_pipeline.hours import Hour
from tests.conftest import REPO
from tests.pipeline.clicks import checksum, produce_hours
from tests.pipeline.tables import ledger, rows_by_hour

pytestmark = pytest.mark.slow


def test_spark_submit_runs_the_job_file(spark, broker, topic_factory, tmp_path):
    submit = Path(sys.executable).with_name("spark-submit")
    topic, warehouse = topic_factory(3), tmp_path / "warehouse"
    hour = Hour(Hour.containing(int(time.time() * 1000)).index - 70)
    produced = produce_hours(broker.bootstrap, topic, {hour: 150}, partitions=3)[hour]
    done = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         str(REPO / "klog_pipeline" / "job.py"), "-b", broker.bootstrap, "-t", topic, "--catch-up",
         "--warehouse", str(warehouse), "--now", str(hour.end_ms + 61_000)],
        cwd=tmp_path, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    rows = rows_by_hour(spark, warehouse / topic)[hour]
    assert len(rows) == 150 and checksum(rows) == checksum(produced)
    assert ledger(warehouse, topic)["hours"][hour.label]["state"] == "loaded"
