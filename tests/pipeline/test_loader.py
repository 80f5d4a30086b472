"""The hourly loader end to end: real appliance, real local Spark, `klog load-hourly`'s
command line. Hours are synthetic past hours (CreateTime stamps set by the producer) and the
loader's "now" is injected, as the hints of issue 7 suggest."""

from __future__ import annotations

import time

import pytest

import klog
from klog_pipeline.hours import Hour
from tests.pipeline.clicks import checksum, produce_hours
from tests.pipeline.tables import ledger, rows_by_hour, snapshot

pytestmark = pytest.mark.slow

SCHEMA = "id bigint, user string, page string, ms bigint, ok boolean, ts bigint"


def past_hour(hours_ago: int) -> Hour:
    return Hour(Hour.containing(int(time.time() * 1000)).index - hours_ago)


def test_three_hours_load_exactly_rerun_is_a_no_op_and_catch_up_loads_the_fourth(
        spark, broker, topic_factory, load_hourly, tmp_path):
    topic, warehouse = topic_factory(6), tmp_path / "warehouse"
    first = past_hour(12)
    hours = [first, first.next(), first.next().next()]
    counts = dict(zip(hours, (420, 360, 300)))
    produced = produce_hours(broker.bootstrap, topic, counts)
    for hour in hours:
        status, out = load_hourly(topic, warehouse, "--hour", hour.label, now=hours[-1])
        assert status == 0, out
        assert "loaded" in out
    table = rows_by_hour(spark, warehouse / topic)
    assert sorted(table) == hours
    for hour in hours:
        assert len(table[hour]) == counts[hour]
        assert checksum(table[hour]) == checksum(produced[hour])
        assert {r["_partition"] for r in table[hour]} == set(range(6))
    entries = ledger(warehouse, topic)["hours"]
    assert [entries[h.label]["records"] for h in hours] == [420, 360, 300]
    for a, b in zip(hours, hours[1:]):  # consecutive hours join: no gap, no overlap
        assert all(entries[a.label]["ranges"][p][1] == entries[b.label]["ranges"][p][0]
                   for p in map(str, range(6)))

    before = snapshot(warehouse)
    status, out = load_hourly(topic, warehouse, "--hour", hours[1].label, now=hours[-1])
    assert status == 0 and "skipped" in out
    assert snapshot(warehouse) == before

    fourth = hours[-1].next()
    produced.update(produce_hours(broker.bootstrap, topic, {fourth: 240}, first_id=10_000))
    status, out = load_hourly(topic, warehouse, "--catch-up", now=fourth)
    assert status == 0, out
    assert [line.split()[0] for line in out.splitlines() if " loaded " in line] == [fourth.label]
    table = rows_by_hour(spark, warehouse / topic)
    assert sorted(table) == [*hours, fourth]
    assert len(table[fourth]) == 240 and checksum(table[fourth]) == checksum(produced[fourth])
    assert all(len(table[h]) == counts[h] for h in hours)


def test_malformed_lines_land_in_rejects_with_partition_and_offset(spark, broker,
                                                                   topic_factory,
                                                                   load_hourly, tmp_path):
    topic, warehouse = topic_factory(6), tmp_path / "warehouse"
    hour = past_hour(20)
    produced = produce_hours(broker.bootstrap, topic, {hour: 120})
    bad_values = [(1, b"not json at all"), (4, b"[1, 2, 3]"), (2, b'{"id": "seven"}'),
                  (2, b'{"id": 1, "ok": "yes"}'), (5, b"")]
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        sent = [producer.send(topic, value, partition=p, timestamp_ms=hour.start_ms + 60_000)
                for p, value in bad_values]
        where = [(f.result(10).partition, f.result(10).offset) for f in sent]
    status, out = load_hourly(topic, warehouse, "--hour", hour.label, "--schema", SCHEMA,
                              "--min-partitions", "12", now=hour)
    assert status == 0, out
    events = rows_by_hour(spark, warehouse / topic)[hour]
    assert len(events) == 120 and checksum(events) == checksum(produced[hour])
    rejects = rows_by_hour(spark, warehouse / "_rejects" / topic)[hour]
    assert sorted((r["partition"], r["offset"]) for r in rejects) == sorted(where)
    by_offset = {(r["partition"], r["offset"]): r for r in rejects}
    assert [bytes(by_offset[w]["value"]) for w in where] == [v for _, v in bad_values]
    reasons = [by_offset[w]["reason"] for w in where]
    assert reasons[0].startswith("not JSON") and "array" in reasons[1]
    assert "field 'id': expected bigint" in reasons[2]
    assert "field 'ok': expected boolean" in reasons[3]
    entry = ledger(warehouse, topic)["hours"][hour.label]
    assert (entry["records"], entry["rejects"]) == (125, 5)
    assert len(list((warehouse / topic).glob("dt=*/hour=*/*.parquet"))) == 12  # split reads


def test_a_gap_is_refused_unless_allowed_and_an_incomplete_hour_waits(
        spark, broker, topic_factory, load_hourly, tmp_path):
    topic, warehouse = topic_factory(2), tmp_path / "warehouse"
    hour = past_hour(30)
    produce_hours(broker.bootstrap, topic, {hour: 40}, partitions=2)
    assert load_hourly(topic, warehouse, "--hour", hour.label, now=hour)[0] == 0
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:  # a straggler of hour
        producer.send(topic, b'{"id": 99}', partition=1, timestamp_ms=hour.end_ms - 1)
    produce_hours(broker.bootstrap, topic, {hour.next(): 40}, partitions=2, first_id=100)
    status, out = load_hourly(topic, warehouse, "--hour", hour.next().label, now=hour.next())
    assert status == 1
    assert "gap: partition 1" in out and "would never be loaded" in out
    assert hour.next().label not in ledger(warehouse, topic)["hours"]
    status, out = load_hourly(topic, warehouse, "--hour", hour.next().label, "--allow-gap",
                              now=hour.next())
    assert status == 0, out

    later = hour.next().next()
    produce_hours(broker.bootstrap, topic, {later: 10}, partitions=2, first_id=200)
    halfway = later.start_ms + 1_800_000
    status, out = load_hourly(topic, warehouse, "--hour", later.label, now=halfway)
    assert status == 1 and "not complete" in out
    status, out = load_hourly(topic, warehouse, "--hour", later.label, "--allow-incomplete",
                              now=halfway)
    assert status == 0 and ledger(warehouse, topic)["hours"][later.label]["state"] == "incomplete"
    produce_hours(broker.bootstrap, topic, {later: 6}, partitions=2, first_id=300)
    status, out = load_hourly(topic, warehouse, "--catch-up", now=later)
    assert status == 0, out
    assert len(rows_by_hour(spark, warehouse / topic)[later]) == 16
    assert ledger(warehouse, topic)["hours"][later.label]["state"] == "loaded"

    status, out = load_hourly(topic, warehouse, "--hour", later.label, "--reload", now=later)
    assert status == 0 and "reloaded" in out
    assert len(rows_by_hour(spark, warehouse / topic)[later]) == 16
