"""Pure planning: options, bound resolution, data-loss checks, minPartitions splits,
maxOffsetsPerTrigger caps, hours. No Spark, no appliance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from klog_pipeline.hours import HOUR_MS, Hour, hours_between, last_complete, parse_moment_ms
from klog_pipeline.options import Bound, parse_options
from klog_pipeline.planning import (
    DataLossError,
    OffsetRange,
    apportion,
    cap_offsets,
    plan_ranges,
    resolve,
    split_ranges,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "clicks"}


def test_options_follow_spark_kafka_names_and_defaults():
    batch = parse_options({**BASE, "MINPARTITIONS": "12", "kafka.max.partition.fetch.bytes": "99",
                           "includeHeaders": "TRUE"}, streaming=False)
    assert batch.subscription.topics == ("clicks",)
    assert (batch.starting, batch.ending) == (Bound("earliest"), Bound("latest"))
    assert batch.min_partitions == 12 and batch.include_headers and batch.fail_on_data_loss
    assert batch.consumer_options()["max_partition_fetch_bytes"] == 99
    stream = parse_options({**BASE, "maxOffsetsPerTrigger": "100"}, streaming=True)
    assert stream.starting == Bound("latest") and stream.max_offsets_per_trigger == 100
    pattern = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "cl.*"},
                            streaming=False)
    assert pattern.subscription.matches("clicks") and not pattern.subscription.matches("xclicks")
    offsets = parse_options({**BASE, "startingOffsets": '{"clicks": {"0": 5, "1": -2}}',
                             "endingTimestamp": "1000"}, streaming=False)
    assert offsets.starting.as_dict() == {("clicks", 0): 5, ("clicks", 1): -2}
    assert offsets.ending == Bound("timestamp", timestamp=1000)


def test_security_options_reach_the_clients_as_given():
    """klog's client's names, or Spark-Kafka-style dotted ones after ``kafka.``; values kept
    as text (a password of digits stays a string) and out of the options' repr."""
    parsed = parse_options({**BASE, "security_protocol": "SASL_SSL", "ssl_cafile": "/ca.pem",
                            "kafka.sasl.mechanism": "SCRAM-SHA-512",
                            "kafka.sasl.plain.username": "spark",
                            "SASL_PLAIN_PASSWORD": "0123", "kafka.ssl.check.hostname": "TRUE",
                            "kafka.fetch.max.wait.ms": "50"}, streaming=False)
    security = {"security_protocol": "SASL_SSL", "ssl_cafile": "/ca.pem",
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "spark",
                "sasl_plain_password": "0123", "ssl_check_hostname": True}
    assert parsed.security_options() == security
    assert parsed.consumer_options() == {"max_partition_fetch_bytes": 4 * 1024 * 1024,
                                         "fetch_max_wait_ms": 50, **security}
    assert "0123" not in repr(parsed)
    assert parse_options(BASE, streaming=False).security_options() == {}
    with pytest.raises(ValueError, match="sasl_mechanism"):
        parse_options({**BASE, "sasl_mechanism": "PLAIN", "kafka.sasl.mechanism": "SCRAM-SHA-512"},
                      streaming=False)


@pytest.mark.parametrize("options, streaming, words", [
    ({"subscribe": "a"}, False, "bootstrap.servers"),
    ({"bootstrap.servers": "h:1"}, False, "exactly one"),
    ({**BASE, "assign": '{"a": [0]}'}, False, "exactly one"),
    ({**BASE, "startingOffsets": "latest"}, False, "not allowed in a batch"),
    ({**BASE, "endingOffsets": '{"clicks": {"0": -2}}'}, False, "earliest"),
    ({**BASE, "endingOffsets": "latest"}, True, "batch queries only"),
    ({**BASE, "startingOffsets": "{nope"}, False, "not valid JSON"),
    ({**BASE, "minPartitions": "0"}, False, "minPartitions"),
    ({**BASE, "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
    ({**BASE, "subscribePattern": "("}, False, "exactly one"),
])
def test_option_mistakes_name_the_option(options, streaming, words):
    with pytest.raises(ValueError, match=words):
        parse_options(options, streaming=streaming)


TPS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 10, ("t", 1): 0}
LATEST = {("t", 0): 100, ("t", 1): 50}


def test_resolve_offsets_timestamps_and_strategies():
    def for_times(wanted):
        return {("t", 0): 40, ("t", 1): None}

    json_bound = Bound("offsets", offsets=((("t", 0), -2), (("t", 1), -1)))
    assert resolve(json_bound, TPS, EARLIEST, LATEST, for_times, role="start") == {
        ("t", 0): 10, ("t", 1): 50}
    stamp = Bound("timestamp", timestamp=123)
    assert resolve(stamp, TPS, EARLIEST, LATEST, for_times, role="end") == {
        ("t", 0): 40, ("t", 1): 50}
    assert resolve(stamp, TPS, EARLIEST, LATEST, for_times, role="start",
                   strategy="latest") == {("t", 0): 40, ("t", 1): 50}
    with pytest.raises(ValueError, match=r"no record of t\[1\]"):
        resolve(stamp, TPS, EARLIEST, LATEST, for_times, role="start")
    with pytest.raises(ValueError, match=r"missing t\[1\]"):
        resolve(Bound("offsets", offsets=((("t", 0), 1),)), TPS, EARLIEST, LATEST, for_times,
                role="start")


def test_a_start_that_retention_deleted_fails_or_is_skipped():
    starts = {("t", 0): 3, ("t", 1): 0}
    with pytest.raises(DataLossError, match=r"offsets 3\.\.9 of t\[0\] are no longer in the log"):
        plan_ranges(TPS, starts, LATEST, EARLIEST, LATEST, fail_on_data_loss=True)
    ranges = plan_ranges(TPS, starts, LATEST, EARLIEST, LATEST, fail_on_data_loss=False)
    assert ranges == [OffsetRange("t", 0, 10, 100), OffsetRange("t", 1, 0, 50)]
    with pytest.raises(ValueError, match="past its high watermark"):
        plan_ranges(TPS, starts, {("t", 0): 101, ("t", 1): 0}, {}, LATEST,
                    fail_on_data_loss=True)


def test_min_partitions_splits_six_equal_ranges_into_twelve():
    ranges = [OffsetRange("t", p, 0, 1000) for p in range(6)]
    split = split_ranges(ranges, 12)
    assert len(split) == 12
    assert split_ranges(ranges, 0) == ranges == split_ranges(ranges, 6)
    assert split_ranges([OffsetRange("t", 0, 5, 5)], 4) == []


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=10), st.integers(1, 40))
def test_split_ranges_covers_every_offset_once(sizes, wanted):
    ranges = [OffsetRange("t", p, 100 * p, 100 * p + s) for p, s in enumerate(sizes)]
    split = split_ranges(ranges, wanted)
    busy = [r for r in ranges if r.size]
    covered = sorted((r.partition, o) for r in split for o in range(r.start, r.end))
    assert covered == sorted((r.partition, o) for r in busy for o in range(r.start, r.end))
    assert all(r.size > 0 for r in split)
    if busy and wanted > len(busy) and sum(r.size for r in busy) >= wanted:
        assert len(split) >= min(wanted, sum(r.size for r in busy)) - len(busy)
        assert len(split) <= wanted


@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=12), st.integers(12, 50))
def test_apportion_sums_to_the_total(sizes, total):
    shares = apportion(sizes, total)
    assert sum(shares) == total and all(s >= 1 for s in shares)


def test_cap_spreads_max_offsets_in_proportion_to_backlog():
    starts = {("t", 0): 0, ("t", 1): 0, ("t", 2): 7}
    ends = {("t", 0): 300, ("t", 1): 100, ("t", 2): 7}
    assert cap_offsets(starts, ends, 1000) == ends
    capped = cap_offsets(starts, ends, 40)
    assert capped == {("t", 0): 30, ("t", 1): 10, ("t", 2): 7}
    assert sum(capped[tp] - starts[tp] for tp in ends) == 40
    one = cap_offsets(starts, ends, 1)
    assert sum(one[tp] - starts[tp] for tp in ends) == 1


def test_hours():
    hour = Hour.parse("2026-11-21T13")
    assert (hour.label, hour.dt, hour.hh) == ("2026-11-21T13", "2026-11-21", "13")
    assert Hour.parse("2026-11-21 13:00") == hour == Hour.containing(hour.start_ms + 5)
    assert hour.end_ms - hour.start_ms == HOUR_MS and hour.next().previous() == hour
    assert not hour.is_complete(hour.end_ms + 59_999, 60_000)
    assert hour.is_complete(hour.end_ms + 60_000, 60_000)
    assert last_complete(hour.end_ms + 60_000, 60_000) == hour
    assert last_complete(hour.end_ms + 59_999, 60_000) == hour.previous()
    assert hours_between(hour, hour.next()) == [hour, hour.next()]
    assert parse_moment_ms("2026-11-21T13:00:00Z") == hour.start_ms == parse_moment_ms(
        str(hour.start_ms))
    with pytest.raises(ValueError, match="not an hour"):
        Hour.parse("2026-11-21")
