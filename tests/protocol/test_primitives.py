"""The primitive readers and writers, including what they refuse."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.protocol import primitives as p
from klog.protocol.exceptions import DecodeError, EncodeError

SETTINGS = settings(derandomize=True, max_examples=200, deadline=None)


def encode(write, value) -> bytes:
    out = bytearray()
    write(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f"),
     (64, b"\x80\x01"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)  # fmt: skip
def test_varint_zigzag_table(value, encoded):
    assert encode(p.write_varint, value) == encoded
    assert p.read_varint(encoded, 0) == (value, len(encoded))


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(value):
    data = encode(p.write_varlong, value)
    assert len(data) <= 10 and p.read_varlong(data + b"junk", 0) == (value, len(data))


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_unsigned_varint_round_trip(value):
    data = encode(p.write_unsigned_varint, value)
    assert p.read_unsigned_varint(data, 0) == (value, len(data))


def test_varint_refuses_overlong_and_truncated_input():
    with pytest.raises(DecodeError):
        p.read_unsigned_varint(b"\xff" * 6, 0)
    with pytest.raises(DecodeError):
        p.read_unsigned_varint(b"\x80\x80", 0)
    with pytest.raises(EncodeError):
        p.write_varint(bytearray(), 2**31)


@pytest.mark.parametrize(
    ("read", "write", "value"),
    [(p.read_int8, p.write_int8, -128), (p.read_int16, p.write_int16, -2),
     (p.read_int32, p.write_int32, 2**31 - 1), (p.read_int64, p.write_int64, -(2**63)),
     (p.read_uint32, p.write_uint32, 2**32 - 1), (p.read_bool, p.write_bool, True),
     (p.read_uuid, p.write_uuid, uuid.UUID(int=12345))],
)  # fmt: skip
def test_fixed_width_round_trip_and_short_reads(read, write, value):
    data = encode(write, value)
    assert read(memoryview(data), 0) == (value, len(data))
    with pytest.raises(DecodeError):
        read(data[:-1], 0)


def test_fixed_width_refuses_out_of_range():
    with pytest.raises(EncodeError):
        p.write_int16(bytearray(), 2**15)


@SETTINGS
@given(st.none() | st.text(max_size=30))
def test_strings_classic_and_compact(value):
    for nullable_write, nullable_read in (
        (p.write_nullable_string, p.read_nullable_string),
        (p.write_compact_nullable_string, p.read_compact_nullable_string),
    ):
        data = encode(nullable_write, value)
        assert nullable_read(data, 0) == (value, len(data))


def test_null_where_not_nullable():
    with pytest.raises(DecodeError):
        p.read_string(b"\xff\xff", 0)
    with pytest.raises(DecodeError):
        p.read_compact_bytes(b"\x00", 0)
    with pytest.raises(EncodeError):
        p.write_string(bytearray(), None)
    with pytest.raises(DecodeError):
        p.read_nullable_string(b"\xff\xfe", 0)  # -2 is no length


def test_bytes_views_are_zero_copy():
    data = memoryview(b"\x00\x00\x00\x03abcdef")
    view, pos = p.read_nullable_bytes_view(data, 0)
    assert view.obj is data.obj and bytes(view) == b"abc" and pos == 7
    assert p.read_bytes(data, 0) == (b"abc", 7)


@SETTINGS
@given(st.none() | st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8))
def test_arrays_classic_and_compact(items):
    for write, read in ((p.write_nullable_array, p.read_nullable_array),
                        (p.write_compact_nullable_array, p.read_compact_nullable_array)):
        data = encode(lambda out, v, w=write: w(out, v, p.write_int32), items)
        assert read(data, 0, p.read_int32, 4) == (items, len(data))


def test_array_counts_are_bounded_by_the_remaining_bytes():
    with pytest.raises(DecodeError, match="claims 3 items"):
        p.read_array(b"\x00\x00\x00\x03" + b"\x00" * 11, 0, p.read_int32, 4)
    with pytest.raises(DecodeError, match="negative count"):
        p.read_array(b"\xff\xff\xff\xfe", 0, p.read_int32, 4)
    with pytest.raises(DecodeError):
        p.read_compact_array(b"\xff\xff\xff\xff\x0f", 0, p.read_int8, 1)


def test_tagged_fields_round_trip_in_tag_order():
    out = bytearray()
    p.write_tagged_fields(out, [(5, b"xy"), (1, b"")])
    assert bytes(out) == b"\x02\x01\x00\x05\x02xy"
    fields, pos = p.read_tagged_fields(bytes(out), 0)
    assert {k: bytes(v) for k, v in fields.items()} == {1: b"", 5: b"xy"} and pos == len(out)
    assert p.skip_tagged_fields(bytes(out) + b"z", 0) == len(out)


def test_tagged_fields_refuse_duplicates_and_overruns():
    with pytest.raises(DecodeError, match="twice"):
        p.read_tagged_fields(b"\x02\x01\x00\x01\x00", 0)
    with pytest.raises(DecodeError):
        p.read_tagged_fields(b"\x01\x01\x05ab", 0)
