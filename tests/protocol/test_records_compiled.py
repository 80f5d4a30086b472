"""The compiled records codec (klog.protocol._recordsc) against the pure-Python reference.

Parity, both ways: the same records give the same bytes (every compression codec, empty
batches, null keys and values, headers, negative and 10-byte varints), the same bytes give the
same records, and damaged bytes (truncated, bad varints, negative lengths, trailing bytes, any
flipped byte) raise the same CorruptBatchError with the same message, or decode the same.
kafka-python's pure-Python encoder is the outside witness. The compiled functions are called
directly, so these tests run whatever ``KLOG_PURE_PYTHON`` says; the selected codec
(``records_codec``) is checked too. All randomness is seeded (hypothesis runs derandomized).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from klog.protocol import records as records_api
from klog.protocol import records_codec, records_columns, records_decode, records_encode
from klog.protocol.record_batch import (
    HEADER_BYTES,
    CorruptBatchError,
    read_header,
    stamp_log_append_time,
)
from klog.protocol.records import (
    CONTROL_COMMIT,
    BatchBuilder,
    Record,
    build_batch,
    control_record,
    decode_batches,
)
from klog.protocol.records_columns import RecordColumns, decode_into_columns
from klog.types import ConsumerRecord

compiled = pytest.importorskip(
    "klog.protocol._recordsc",
    reason="the compiled records codec is not built (setup.py builds it during pip install; "
    "it needs a C compiler and the Python headers)",
)

BASE_TS = 1_750_000_000_000
CODECS = [0, 1, 2, 3, 4]
SETTINGS = settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

small_bytes = st.binary(max_size=40)
keys_or_values = st.one_of(
    st.none(), small_bytes, st.binary(min_size=100, max_size=400),
    st.builds(bytearray, small_bytes),
)
headers = st.one_of(
    st.none(), st.just([]), st.just(()),
    st.lists(st.tuples(st.text(max_size=12) | small_bytes, st.none() | small_bytes), max_size=4),
)
timestamps = st.one_of(  # any two differ by less than 2**63: every delta is a varlong
    st.integers(BASE_TS - 100_000, BASE_TS + 10**9),  # deltas of every varint size, some < 0
    st.integers(-(2**62), 2**62),  # 9- and 10-byte varints, large negative deltas
)
record_tuples = st.lists(st.tuples(timestamps, keys_or_values, keys_or_values, headers),
                         max_size=40)


def pure_body(records, base_ts, now_ms=None) -> tuple[bytes, int]:
    parts, max_ts = records_encode.encode_all(records, base_ts, now_ms)
    return b"".join(parts), max_ts


def section(batch: bytes) -> tuple[bytes, int, int, int]:
    """(records section, count, base_offset, base_ts) of an uncompressed batch."""
    header = read_header(batch, 0)
    return batch[HEADER_BYTES:], header.records_count, header.base_offset, header.base_timestamp


def as_bytes(data):
    return None if data is None else bytes(data)


def as_text(key):
    return key if isinstance(key, str) else bytes(key).decode("utf-8", "replace")


def outcome(decode, data, count, base_offset=0, base_ts=BASE_TS, record_type=Record):
    """The records, or the error (type and message) a decoder gives."""
    try:
        return decode(data, 0, len(data), count, base_offset, base_ts, record_type)
    except CorruptBatchError as exc:
        return type(exc), str(exc)


# --- encoding ----------------------------------------------------------------------------------


@SETTINGS
@given(records=record_tuples, base_ts=timestamps)
def test_compiled_encoder_writes_the_pure_bytes(records, base_ts):
    try:
        expected = pure_body(records, base_ts)
    except ValueError:  # a delta past 64 bits: the compiled one declines, the wrapper raises
        assert compiled.encode_records(records, base_ts, None) is None
        return
    assert compiled.encode_records(records, base_ts, None) == expected


@SETTINGS
@given(records=record_tuples.filter(bool), codec=st.sampled_from(CODECS),
       base_offset=st.integers(0, 2**40))
def test_batches_are_identical_under_both_codecs_for_every_compression(
    records, codec, base_offset
):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_api, "encode_all", records_encode.encode_all)
        patch.setattr(records_api, "encode_one", records_encode.encode_one)
        pure = build_batch(records, codec=codec, base_offset=base_offset)
        pure_builder = BatchBuilder(batch_size=1 << 30, codec=codec)
        for record in records:
            pure_builder.append(*record)
    assert build_batch(records, codec=codec, base_offset=base_offset) == pure
    builder = BatchBuilder(batch_size=1 << 30, codec=codec)
    for record in records:
        builder.append(*record)
    assert builder.size_estimate == pure_builder.size_estimate
    assert builder.build() == pure_builder.build()


@SETTINGS
@given(records=record_tuples.filter(bool))
def test_kafka_python_encodes_the_same_records_section(records):
    base_ts = records[0][0]
    if any(not -(2**31) <= ts - base_ts < 2**31 for ts, *_ in records):
        return  # kafka-python's encoder is written for deltas of a few weeks
    builder = KpBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    ours = [(ts, as_bytes(key), as_bytes(value), [(as_text(k), v) for k, v in hdrs or []])
            for ts, key, value, hdrs in records]
    for offset, record in enumerate(ours):
        builder.append(offset, *record)
    theirs = bytes(builder.build())
    body, max_ts = compiled.encode_records(ours, base_ts, None)
    assert body == theirs[HEADER_BYTES:]
    assert build_batch(ours, partition_leader_epoch=0) == theirs  # kafka-python writes 0
    assert max_ts == read_header(theirs, 0).max_timestamp


def test_empty_batches_are_identical():
    assert compiled.encode_records([], BASE_TS, None) == (b"", BASE_TS)
    assert compiled.decode_records(b"", 0, 0, 0, 0, BASE_TS, Record) == []
    empty = build_batch([], now_ms=BASE_TS)
    assert list(decode_batches(empty)) == [(read_header(empty, 0), [])]


def test_none_timestamps_take_now_ms_in_both():
    records = [(None, b"k", b"v", None), (BASE_TS + 5, None, None, [("h", None)])]
    assert compiled.encode_records(records, BASE_TS, BASE_TS) == pure_body(records, BASE_TS,
                                                                           BASE_TS)
    assert compiled.encode_record(0, None, BASE_TS, b"k", b"v", None, BASE_TS) == (
        b"", records_encode.encode_one(0, None, BASE_TS, b"k", b"v", None, BASE_TS)[1], BASE_TS)


@pytest.mark.parametrize(
    "record",
    [
        (None, b"k", b"v", None),  # no timestamp, no now_ms
        (1.5, b"k", b"v", None),
        (True, b"k", b"v", None),
        (BASE_TS, "k", b"v", None),
        (BASE_TS, b"k", 7, None),
        (BASE_TS, b"k", b"v", [("h",)]),
        (BASE_TS, b"k", b"v", [(1, b"x")]),
        (BASE_TS, b"k", b"v", [("h", "text")]),
        (BASE_TS, b"k", b"v", [("\ud800", b"x")]),  # a lone surrogate is not UTF-8
        (BASE_TS + 2**64, b"k", b"v", None),
    ],
)
def test_bad_input_raises_the_pure_error_through_the_selected_codec(record):
    """The compiled encoder declines what it does not know; the pure one then gives the error."""
    records = [(BASE_TS, None, b"first", None), record]
    assert compiled.encode_records(records, BASE_TS, None) is None
    with pytest.raises(Exception) as pure_error:
        records_encode.encode_all(records, BASE_TS, None)
    with pytest.raises(pure_error.type) as selected_error:
        records_codec.encode_all(records, BASE_TS, None)
    assert str(selected_error.value) == str(pure_error.value)


def test_unusual_but_valid_input_falls_back_to_the_same_bytes():
    records = [(BASE_TS, memoryview(b"key"), b"v", None), [BASE_TS, b"k", b"v", None],
               (BASE_TS, b"k", b"v", [["h", b"x"]])]
    for record in records:
        assert compiled.encode_records([record], BASE_TS, None) is None
        parts, _ = records_codec.encode_all([record], BASE_TS, None)
        assert b"".join(parts) == pure_body([record], BASE_TS)[0]


# --- decoding ----------------------------------------------------------------------------------


@SETTINGS
@given(records=record_tuples.filter(bool), codec=st.sampled_from(CODECS),
       base_offset=st.integers(0, 2**40))
def test_compiled_decoder_gives_the_pure_records_for_every_compression(
    records, codec, base_offset
):
    records = [(ts, key, value, hdrs and [(as_text(k), v) for k, v in hdrs])  # readable keys
               for ts, key, value, hdrs in records]
    batch = build_batch(records, codec=codec, base_offset=base_offset)
    [(header, selected)] = list(decode_batches(batch))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_api, "decode_records", records_decode.decode_records)
        [(_, pure)] = list(decode_batches(batch))
    assert selected == pure
    assert [r.offset for r in pure] == list(range(base_offset, base_offset + len(records)))
    if codec == 0:
        data, count, base_offset, base_ts = section(batch)
        assert outcome(compiled.decode_records, data, count, base_offset, base_ts) == pure


@SETTINGS
@given(records=record_tuples.filter(bool), data=st.data())
def test_damaged_sections_give_the_same_records_or_the_same_error(records, data):
    base_ts = records[0][0]
    body, _ = pure_body(records, base_ts)
    damaged = bytearray(body)
    for _ in range(data.draw(st.integers(1, 4))):
        if damaged:
            at = data.draw(st.integers(0, len(damaged) - 1))
            damaged[at] = data.draw(st.integers(0, 255))
    damaged = bytes(damaged)
    count = data.draw(st.sampled_from([len(records), len(records) - 1, len(records) + 1]))
    pure = outcome(records_decode.decode_records, damaged, count, 0, base_ts)
    assert outcome(records_codec.decode_records, damaged, count, 0, base_ts) == pure
    raw = compiled.decode_records(damaged, 0, len(damaged), count, 0, base_ts, Record)
    assert raw is None or raw == pure  # the compiled decoder never guesses


def test_every_truncation_and_trailing_bytes_raise_the_same_error():
    records = [(BASE_TS - 70_000 + i * 40_000, b"key-%d" % i if i % 2 else None,
                b"v" * (i * 37), [("h", b"x"), ("n", None)] if i % 3 == 0 else None)
               for i in range(12)]
    body, _ = pure_body(records, BASE_TS - 70_000)
    for cut in range(len(body)):
        pure = outcome(records_decode.decode_records, body[:cut], 12, 0, BASE_TS)
        assert pure[0] is CorruptBatchError
        assert outcome(records_codec.decode_records, body[:cut], 12, 0, BASE_TS) == pure
    for extra in (b"\x00", b"\x02ab", bytes(100)):
        pure = outcome(records_decode.decode_records, body + extra, 12, 0, BASE_TS)
        assert pure[0] is CorruptBatchError and "left after" in pure[1]
        assert outcome(records_codec.decode_records, body + extra, 12, 0, BASE_TS) == pure


@pytest.mark.parametrize(
    "record",
    [
        b"\x0e\x00\x00\x00\x03\x02\x01\x00",  # key length -2
        b"\x0e\x00\x00\x00\x01\x05\x01\x00",  # value length -3
        b"\x0c\x00\x00\x00\x01\x01\x01",  # header count -1
        b"\x20\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00",  # an 11-byte varint
        b"\x14\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01",  # a header key that is not UTF-8
        b"\x03\x00\x00\x00\x01\x01\x00",  # a negative record length
    ],
)
def test_bad_varints_and_negative_lengths_raise_the_same_error(record):
    pure = outcome(records_decode.decode_records, record, 1)
    assert pure[0] is CorruptBatchError
    assert outcome(records_codec.decode_records, record, 1) == pure
    assert compiled.decode_records(record, 0, len(record), 1, 0, BASE_TS, Record) is None


def test_64_bit_edges_decode_as_python_ints():
    """Timestamps and offsets that overflow int64 after adding the base: Python ints in both."""
    body, _ = pure_body([(2**62, b"k", b"v", None), (-(2**62), None, b"v", None)], 0)
    for base_ts in (0, 2**63 - 1, -(2**63)):
        pure = outcome(records_decode.decode_records, body, 2, 2**63 - 1, base_ts)
        assert outcome(records_codec.decode_records, body, 2, 2**63 - 1, base_ts) == pure


def test_records_are_built_as_the_given_record_type_and_seen_by_the_gc():
    cls = ConsumerRecord.class_for("clicks", 3)
    body, _ = pure_body([(BASE_TS, b"k", b"v", [("h", b"x")]), (BASE_TS, None, None, None)],
                        BASE_TS)
    records = compiled.decode_records(body, 0, len(body), 2, 10, BASE_TS, cls)
    assert [type(r) for r in records] == [cls, cls]
    assert records == records_decode.decode_records(body, 0, len(body), 2, 10, BASE_TS, cls)
    assert records[0].topic == "clicks" and records[1].headers == []
    assert all(gc.is_tracked(r) and gc.is_tracked(r.headers) for r in records)
    assert records[0].headers is not records[1].headers


# --- columns -----------------------------------------------------------------------------------


def pure_columns(buf, **options):
    """decode_into_columns with the compiled columnar decoder switched off."""
    columns = RecordColumns()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_columns, "compiled_columns", None)
        try:
            decode_into_columns(buf, columns, **options)
        except CorruptBatchError as exc:
            return columns, (type(exc), str(exc))
    return columns, None


def compiled_columns(buf, **options):
    columns = RecordColumns()
    try:
        decode_into_columns(buf, columns, **options)
    except CorruptBatchError as exc:
        return columns, (type(exc), str(exc))
    return columns, None


@SETTINGS
@given(batches=st.lists(st.tuples(record_tuples.filter(bool), st.sampled_from(CODECS)),
                        min_size=1, max_size=4))
def test_columns_are_identical_under_both_codecs_and_match_the_records(batches):
    buf = b""
    for index, (records, codec) in enumerate(batches):
        base_ts = records[0][0]
        records = [(base_ts, key, value, hdrs and [(as_text(k), v) for k, v in hdrs])
                   for _, key, value, hdrs in records]  # deltas 0: the ints fit int64 columns
        buf += build_batch(records, codec=codec, base_offset=1000 * index)
    columns, error = compiled_columns(buf)
    assert error is None
    assert columns.buffers() == pure_columns(buf)[0].buffers()
    assert columns.records() == [r for _, records in decode_batches(buf) for r in records]
    assert len(columns.key_offsets) == len(columns.value_offsets) == 8 * (len(columns) + 1)


def test_columns_skip_control_batches_and_stamp_log_append_time():
    data = build_batch([(BASE_TS, b"k", b"v", None), (BASE_TS + 9, None, b"w", None)])
    data = bytearray(data)
    stamp_log_append_time(data, 0, len(data), BASE_TS + 500)
    key, value = control_record(CONTROL_COMMIT)
    control = build_batch([(BASE_TS, key, value, None)], is_control=True, base_offset=2)
    buf = bytes(data) + control
    columns, _ = compiled_columns(buf)
    assert columns.buffers() == pure_columns(buf)[0].buffers()
    assert columns.records() == [Record(0, BASE_TS + 500, b"k", b"v", []),
                                 Record(1, BASE_TS + 500, None, b"w", [])]
    assert len(compiled_columns(buf, skip_control=False)[0]) == 3


def test_a_bad_batch_raises_the_same_error_and_keeps_the_batches_before_it():
    good = build_batch([(BASE_TS, b"k", b"v", [("h", b"x")])])
    bad = bytearray(build_batch([(BASE_TS, b"k", b"v", None)], base_offset=1))
    bad[HEADER_BYTES + 4] = 0x03  # the key length becomes -2
    buf = good + bytes(bad)
    compiled, compiled_error = compiled_columns(buf, verify_crc=False)
    pure, pure_error = pure_columns(buf, verify_crc=False)
    assert compiled_error == pure_error and "key length -2" in pure_error[1]
    assert compiled.buffers() == pure.buffers() and len(compiled) == 1


# --- selection ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("1", "python"), ("", "C"), ("0", "C"), (None, "C")])
def test_klog_pure_python_selects_the_pure_codec(value, expected):
    env = {k: v for k, v in os.environ.items() if k != "KLOG_PURE_PYTHON"}
    if value is not None:
        env["KLOG_PURE_PYTHON"] = value
    out = subprocess.run(
        [sys.executable, "-c",
         "from klog.protocol import records_codec as c, records as r;"
         "print(c.IMPLEMENTATION, r.decode_records is c.decode_records)"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.split() == [expected, "True"]
