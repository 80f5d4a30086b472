"""The pure decisions: roll, retention, flush."""

from __future__ import annotations

from appliance.segments.policy import SegmentStats, flush_due, retention_plan, roll_reason

ROLL = dict(size_bytes=100, append_bytes=10, rolling_base_ms=0, now_ms=10, relative_last_offset=5,
            index_full=False, segment_bytes=1000, segment_ms=100)


def test_no_roll_when_it_fits():
    assert roll_reason(**ROLL) is None


def test_roll_reasons():
    assert roll_reason(**{**ROLL, "append_bytes": 901}) == "segment.bytes"
    assert roll_reason(**{**ROLL, "append_bytes": 900}) is None
    assert roll_reason(**{**ROLL, "now_ms": 101}) == "segment.ms"
    assert roll_reason(**{**ROLL, "now_ms": 100}) is None
    assert roll_reason(**{**ROLL, "index_full": True}) == "index full"
    assert roll_reason(**{**ROLL, "relative_last_offset": 2**31}) == "offset overflow"


def test_an_empty_segment_never_rolls():
    assert roll_reason(**{**ROLL, "size_bytes": 0, "append_bytes": 5000, "now_ms": 10**9}) is None


def _segs(*specs):
    """(base, next, size, ts) tuples; the last is the active segment."""
    return [SegmentStats(*s) for s in specs]


PLAN = dict(now_ms=1000, retention_ms=-1, retention_bytes=-1, log_start_offset=0, high_watermark=30)


def test_retention_by_time_stops_at_the_first_young_segment():
    segs = _segs((0, 10, 100, 100), (10, 20, 100, 950), (20, 30, 100, 100))
    plan = retention_plan(segs, **{**PLAN, "retention_ms": 500})
    assert plan.delete_count == 1 and plan.reasons == ("retention.ms",)
    assert plan.log_start_offset == 10 and not plan.roll_active


def test_retention_by_time_can_take_the_active_segment():
    segs = _segs((0, 10, 100, 100), (10, 20, 100, 100))
    plan = retention_plan(segs, **{**PLAN, "retention_ms": 500, "high_watermark": 20})
    assert plan.delete_count == 2 and plan.roll_active and plan.log_start_offset == 20


def test_retention_never_deletes_an_empty_active_segment_nor_above_the_high_watermark():
    segs = _segs((0, 10, 100, 100), (10, 10, 0, -1))
    plan = retention_plan(segs, **{**PLAN, "retention_ms": 0, "high_watermark": 10})
    assert plan.delete_count == 1
    segs = _segs((0, 10, 100, 100), (10, 20, 100, 100))
    plan = retention_plan(segs, **{**PLAN, "retention_ms": 0, "high_watermark": 15})
    assert plan.delete_count == 1


def test_retention_by_size_keeps_the_log_under_the_bound():
    segs = _segs((0, 10, 100, 900), (10, 20, 100, 900), (20, 30, 100, 900))
    # Kafka's rule: delete a segment only while the log stays at or above the bound without it
    assert retention_plan(segs, **{**PLAN, "retention_bytes": 250}).delete_count == 0
    assert retention_plan(segs, **{**PLAN, "retention_bytes": 200}).delete_count == 1
    assert retention_plan(segs, **{**PLAN, "retention_bytes": 101}).delete_count == 1
    assert retention_plan(segs, **{**PLAN, "retention_bytes": 100}).delete_count == 2
    plan = retention_plan(segs, **{**PLAN, "retention_bytes": 0})
    assert plan.delete_count == 3 and plan.roll_active and plan.reasons == ("retention.bytes",)


def test_retention_by_log_start_offset():
    segs = _segs((0, 10, 100, 900), (10, 20, 100, 900), (20, 30, 100, 900))
    plan = retention_plan(segs, **{**PLAN, "log_start_offset": 15})
    assert plan.delete_count == 1 and plan.log_start_offset == 15
    assert plan.reasons == ("log start offset",)


def test_flush_due():
    args = dict(unflushed_messages=3, last_flush_ms=0, now_ms=10, flush_messages=5, flush_ms=100)
    assert not flush_due(**args)
    assert flush_due(**{**args, "unflushed_messages": 5})
    assert flush_due(**{**args, "now_ms": 100})
    assert not flush_due(**{**args, "unflushed_messages": 0, "now_ms": 10**9})
