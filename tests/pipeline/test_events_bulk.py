"""The bulk JSON path gives the per-line path's answer, byte for byte in Parquet, or stands
aside: plain batches, and batches each holding one odd line among plain ones."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest

from klog_pipeline import events
from klog_pipeline.event_schema import REJECTS, EventSchema
from klog_pipeline.events import parse_batch
from klog_pipeline.events_bulk import parse_bulk
from tests.pipeline.test_events import batch

SCHEMA = EventSchema.parse("s string, n bigint, d double, b boolean, i int")
PLAIN = [b'{"s":"a","n":1,"d":1.5,"b":true,"i":2}', b'{"s":"\\u00e9\\n","n":-7,"d":3}',
         b"{}", b'{"d":0.0,"n":9223372036854775807,"s":null}', b'{"d":1e300,"b":false}',
         b'{"s": "spaced" , "i" : -2147483648}', b'{"s":"\\u0000 \\/"}',
         b'{"d":123456789012345678901234567890}', b'{"d":2.2250738585072011e-308}']
ODD = [None, b"", b"null", b"1", b"[1]", b'"s"', b" {}", b"{} ", b'{"s":1.50}', b'{"s":{"a":1}}',
       b'{"s":true}', b'{"n":1.5}', b'{"n":1.0}', b'{"n":1e2}', b'{"n":true}', b'{"d":true}',
       b'{"b":1}', b'{"n":99999999999999999999}', b'{"i":3000000000}', b'{"n":1,"n":2}',
       b'{"x":1}', b'{"S":"case"}', b'{"s":"a\xff"}', b'{"s":"\\ud800"}', b'{"d":1e400}',
       b'{"d":1.7976931348623157e309}', b'{"d":NaN}', b'{"d":-0}', b'{"d":0}', b'{"d":-1e-400}',
       b'{"s":"x"}{"s":"y"}', b'{"s":"x"},', b'{"b":true,}', b"{'s':'x'}", b'{"d":.5}',
       b'{"n":01}', b'{"n":+1}', b'{"s":"\t"}', b'{"s":"a",\n"n":1}', b'{"s":"a"}\r',
       b'{"n":-0}', b'{"d":-0.0}', b'{"s":"\xed\xa0\x80"}', b'{"us\\u0065r":1}']


def per_line(values, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(events, "parse_bulk", lambda batch, schema: None)
        return parse_batch(batch(values), SCHEMA)


def parquet_bytes(table_batch, schema) -> bytes:
    out = io.BytesIO()
    writer = pq.ParquetWriter(out, schema, compression="snappy")
    writer.write_batch(table_batch)
    writer.close()
    return out.getvalue()


def test_plain_lines_take_the_bulk_path_with_the_same_parquet_bytes(monkeypatch):
    values = PLAIN * 50
    assert parse_bulk(batch(values), SCHEMA) is not None
    bulk, rejects = parse_batch(batch(values), SCHEMA)
    reference, reference_rejects = per_line(values, monkeypatch)
    assert rejects is None and reference_rejects is None
    assert bulk.equals(reference)
    assert parquet_bytes(bulk, SCHEMA.arrow()) == parquet_bytes(reference, SCHEMA.arrow())


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_an_odd_line_gets_the_per_line_answer(odd, monkeypatch):
    values = [*PLAIN, odd, *PLAIN]
    got, got_rejects = parse_batch(batch(values), SCHEMA)
    want, want_rejects = per_line(values, monkeypatch)
    assert got.equals(want)
    assert parquet_bytes(got, SCHEMA.arrow()) == parquet_bytes(want, SCHEMA.arrow())
    assert (got_rejects is None) == (want_rejects is None)
    if want_rejects is not None:
        assert got_rejects.equals(want_rejects)
        assert parquet_bytes(got_rejects, REJECTS) == parquet_bytes(want_rejects, REJECTS)


def test_a_schema_of_strings_only_and_an_empty_schema(monkeypatch):
    for ddl in ("s string", ""):
        schema = EventSchema.parse(ddl)
        values = [b'{"s":"a"}', b'{"s":"b"}']
        got = parse_batch(batch(values), schema)[0]
        with monkeypatch.context() as patch:
            patch.setattr(events, "parse_bulk", lambda batch, schema: None)
            assert got.equals(parse_batch(batch(values), schema)[0])
