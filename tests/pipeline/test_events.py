"""JSON log lines into rows and rejects, the event schema, and the ledger's rules. Pure:
pyarrow batches built here, no Spark, no appliance."""

from __future__ import annotations

import pyarrow as pa
import pytest

from klog_pipeline.event_schema import EventSchema, infer
from klog_pipeline.events import parse_batch
from klog_pipeline.hours import Hour
from klog_pipeline.ledger import (
    INCOMPLETE,
    LOADED,
    HourEntry,
    Ledger,
    LedgerError,
    contiguity_problems,
    locked,
)

TS = pa.timestamp("us", tz="UTC")


def batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([b"k"] * n, pa.binary()), pa.array(values, pa.binary()),
         pa.array([3] * n, pa.int32()), pa.array(range(100, 100 + n), pa.int64()),
         pa.array(range(n), pa.int64()).cast(TS)],
        names=["key", "value", "partition", "offset", "timestamp"])


def test_schema_ddl_round_trip_and_mistakes():
    schema = EventSchema.parse("user string, n LONG, x integer, p double, ok boolean")
    assert schema.ddl == "user string, n bigint, x int, p double, ok boolean"
    assert schema.arrow().names[:5] == ["user", "n", "x", "p", "ok"]
    assert schema.arrow().names[5:] == ["_key", "_partition", "_offset", "_timestamp", "_extra"]
    for bad, words in [("user", "name type"), ("u varchar", "not one of"),
                       ("hour int", "reserved"), ("a int, A int", "repeated")]:
        with pytest.raises(ValueError, match=words):
            EventSchema.parse(bad)


def test_inference_takes_the_narrowest_type_and_skips_unusable_names():
    schema = infer([{"a": 1, "b": 1, "c": True, "d": "x", "e": {"n": 1}, "dt": "x", "bad-name": 1},
                    {"a": 2, "b": 2.5, "c": None, "d": 3, "A": 1}])
    assert schema.fields == (("a", "bigint"), ("b", "double"), ("c", "boolean"),
                             ("d", "string"), ("e", "string"))


def test_good_lines_become_typed_rows_with_klog_columns_and_extras():
    schema = EventSchema.parse("user string, n bigint, p double, ok boolean, meta string")
    events, rejects = parse_batch(batch([
        b'{"user": "a", "n": 1, "p": 2, "ok": true, "meta": {"x": [1]}}',
        b'{"user": "b", "n": null, "new_field": 7}',
    ]), schema)
    assert rejects is None
    assert events.to_pylist()[0] | {"_timestamp": None} == {
        "user": "a", "n": 1, "p": 2.0, "ok": True, "meta": '{"x":[1]}', "_key": b"k",
        "_partition": 3, "_offset": 100, "_timestamp": None, "_extra": None}
    assert events.to_pylist()[1]["_extra"] == '{"new_field":7}'


def test_bad_lines_become_rejects_with_partition_offset_and_reason():
    schema = EventSchema.parse("user string, n bigint, ok boolean")
    values = [b'{"user": "a", "n": 1}', b"not json", b"[1, 2]", None, b'{"n": 1.5}',
              b'{"n": "7"}', b'{"ok": 1}', b'{"n": 99999999999999999999}', b'{"n": true}',
              b'{"user": "z", "n": 2}']
    events, rejects = parse_batch(batch(values), schema)
    assert events.column("_offset").to_pylist() == [100, 109]
    rows = rejects.to_pylist()
    assert [(r["partition"], r["offset"]) for r in rows] == [(3, 100 + i) for i in range(1, 9)]
    assert [r["value"] for r in rows] == values[1:9]
    reasons = [r["reason"] for r in rows]
    assert reasons[0].startswith("not JSON") and "array" in reasons[1]
    assert reasons[2] == "null value"
    assert "expected bigint, got number 1.5" in reasons[3] and "got string" in reasons[4]
    assert "expected boolean" in reasons[5] and "expected bigint" in reasons[6]
    assert "got boolean" in reasons[7]


def test_ledger_round_trip_contiguity_and_lock(tmp_path):
    hour = Hour.parse("2026-11-21T13")
    ledger = Ledger(tmp_path / "t.json", "t", "a string")
    ledger.hours[hour] = HourEntry(LOADED, {0: (0, 10), 1: (5, 9)}, records=9)
    ledger.hours[hour.next().next()] = HourEntry(INCOMPLETE, {0: (12, 20)})
    ledger.save()
    again = Ledger.load(tmp_path / "t.json", "t")
    assert again == ledger and again.done(hour) and again.pending() == [hour.next().next()]
    assert contiguity_problems(again, hour.next(), {0: (10, 12), 1: (9, 9)}, {}) == []
    problems = contiguity_problems(again, hour.next(), {0: (12, 15), 1: (8, 9)}, {0: 12})
    assert problems == [
        "gap: partition 0: hour 2026-11-21T13 ends at offset 10 but hour 2026-11-21T14 starts "
        "at 12; offsets 10..11 would never be loaded (retention deleted them: the log now "
        "starts at 12)",
        "overlap: partition 1: hour 2026-11-21T13 ends at offset 9 but hour 2026-11-21T14 "
        "starts at 8; offsets 8..8 would be loaded twice"]
    with pytest.raises(LedgerError, match="not a format-1 ledger of topic 'u'"):
        Ledger.load(tmp_path / "t.json", "u")
    with (locked(tmp_path / "t.lock"), pytest.raises(LedgerError, match="another loader"),
          locked(tmp_path / "t.lock")):
        pass
