"""The per-worker metrics areas: a document round-trips, areas are independent, one too large
is refused without touching the area, a writer killed mid-write reads as None (not as torn
data) until its next incarnation writes again, and a real mapping shares it across processes."""

from __future__ import annotations

import os

import pytest

from appliance.shm import create_region, seqlock
from appliance.shm.layout import METRICS_DOCUMENT_MAX_BYTES
from appliance.shm.metrics_area import DocumentTooLargeError, MetricsAreas
from tests.shm.conftest import SMALL


def test_a_document_round_trips_per_worker(buffer):
    areas = MetricsAreas(buffer, SMALL)
    assert areas.read(0) is None  # never written
    areas.publish(0, {"requests": [[0, 8, 5, 1]], "lag": None}, now_ms=1000)
    areas.publish(3, {"loop_lag_s": 0.25}, now_ms=2000)
    assert areas.read(0) == (os.getpid(), 1000, {"requests": [[0, 8, 5, 1]], "lag": None})
    assert areas.read(3)[2] == {"loop_lag_s": 0.25}
    assert areas.read(1) is None
    areas.publish(0, {"short": 1}, now_ms=3000)  # a shorter document replaces a longer one
    assert areas.read(0) == (os.getpid(), 3000, {"short": 1})
    with pytest.raises(IndexError):
        areas.publish(SMALL.max_workers, {}, now_ms=0)


def test_a_document_too_large_is_refused_and_the_old_one_stays(buffer):
    areas = MetricsAreas(buffer, SMALL)
    areas.publish(1, {"kept": True}, now_ms=1)
    with pytest.raises(DocumentTooLargeError, match="the area holds"):
        areas.publish(1, {"x": "y" * METRICS_DOCUMENT_MAX_BYTES}, now_ms=2)
    assert areas.read(1)[2] == {"kept": True}


def test_a_writer_killed_mid_write_reads_as_none_until_rewritten(buffer):
    areas = MetricsAreas(buffer, SMALL, timeout_s=0.01)
    areas.publish(2, {"n": 1}, now_ms=1)
    seqlock.begin(buffer, SMALL.metrics_area(2), "metrics area")  # dies here: sequence odd
    assert areas.read(2) is None
    MetricsAreas(buffer, SMALL).publish(2, {"n": 2}, now_ms=2)  # the next incarnation repairs
    assert areas.read(2)[2] == {"n": 2}


def test_a_real_region_shares_the_areas_between_processes(shm_name):
    region = create_region(shm_name, SMALL)
    try:
        pid = os.fork()
        if pid == 0:  # a "worker": publish through its own view of the mapping, then leave
            region.metrics.publish(1, {"from": "child"}, now_ms=5)
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert region.metrics.read(1) == (pid, 5, {"from": "child"})
    finally:
        region.unlink()
        region.close()
