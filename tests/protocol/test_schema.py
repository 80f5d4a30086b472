"""The declaration language: construction, defaults, flexible versions, tagged fields, errors."""

from __future__ import annotations

import pytest

from klog.protocol.apis import fetch, produce
from klog.protocol.chunks import ChunkWriter, join_chunks
from klog.protocol.exceptions import DecodeError, EncodeError
from klog.protocol.fieldtypes import INT8, INT32, INT64, RECORDS, STRING, Array
from klog.protocol.schema import Field, Message, Struct


class Point(Struct):
    x = Field(INT32)
    y = Field(INT32, "1+", default=-1)


class Toy(Message, versions="0-2", flexible="2+"):
    name = Field(STRING, nullable="1+")
    points = Field(Array(Point))
    blob = Field(RECORDS, nullable="0+")
    epoch = Field(INT64, "2+", tag=0, default=-1)
    flag = Field(INT8, "2+", tag=3)


def encode(message, version: int) -> bytes:
    out = ChunkWriter(size_prefix=False)
    message.encode_into(out, version)
    return join_chunks(out.finish())


def test_construction_by_keyword_with_defaults():
    toy = Toy(points=[Point(x=1)])
    assert (toy.name, toy.blob, toy.epoch, toy.flag) == (None, None, -1, 0)
    assert toy.points[0].y == -1
    assert Toy().points == [] and Toy().points is not Toy().points
    with pytest.raises(TypeError, match="no field"):
        Toy(nme="typo")


def test_list_and_struct_defaults_are_made_on_first_use_and_kept():
    """A default list or struct is not made with the instance (a Fetch answer's partition
    carries three tagged structs that most versions never send), but on first use, once per
    instance: what is appended to it or set on it stays."""
    part = fetch.PartitionData(partition_index=1, error_code=0, high_watermark=5)
    assert not {"current_leader", "diverging_epoch", "snapshot_id"} & vars(part).keys()
    leader = part.current_leader
    assert (leader.leader_id, leader.leader_epoch) == (-1, -1)
    leader.leader_id = 7
    assert part.current_leader is leader and part.current_leader.leader_id == 7
    other = fetch.PartitionData(partition_index=2, error_code=0, high_watermark=5)
    assert other.current_leader.leader_id == -1 and other.current_leader is not leader
    toy = Toy()
    toy.points.append(Point(x=1))
    assert toy.points == [Point(x=1)] and Toy().points == []
    assert isinstance(Toy.points, Field)  # on the class, the declaration


def test_a_tagged_struct_never_used_is_not_sent_and_one_set_is():
    """The encoder takes a tagged field never made for its default: no tag; set, it travels
    (Fetch v12's current leader, KIP-951), and decodes to what was set."""
    def answer(**kw):
        return fetch.Response(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            fetch.FetchableTopicResponse(topic="t", partitions=[fetch.PartitionData(
                partition_index=0, error_code=0, high_watermark=5, records=b"", **kw)])])
    plain, touched = answer(), answer()
    assert touched.responses[0].partitions[0].current_leader.leader_id == -1  # made, default
    assert encode(plain, 12) == encode(touched, 12)
    led = answer(current_leader=fetch.LeaderIdAndEpoch(leader_id=3, leader_epoch=4))
    data = encode(led, 12)
    assert len(data) > len(encode(plain, 12))
    got = fetch.Response.decode(data, 12).responses[0].partitions[0]
    assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (3, 4)
    assert got.diverging_epoch == fetch.EpochEndOffset()  # absent: its default, made on use


def test_struct_types_are_module_attributes_named_as_in_kafka():
    assert produce.TopicProduceData.__name__ == "TopicProduceData"
    assert produce.Response is produce.ProduceResponse
    assert [f.name for f in fetch.PartitionData.fields][:3] == [
        "partition_index", "error_code", "high_watermark"]


def test_fields_absent_from_a_version_decode_to_defaults():
    data = encode(Toy(name="n", points=[Point(x=3, y=4)]), 0)
    decoded = Toy.decode(data, 0)
    assert decoded.points == [Point(x=3, y=-1)]  # y does not exist in v0
    assert decoded.epoch == -1


def test_flexible_version_uses_compact_types_and_tags():
    toy = Toy(name="ab", points=[], blob=b"xyz", epoch=7)
    data = encode(toy, 2)
    assert data == b"\x03ab" + b"\x01" + b"\x04xyz" + b"\x01\x00\x08" + (7).to_bytes(8, "big")
    assert Toy.decode(data, 2) == toy


def test_unknown_tags_are_skipped_and_known_ones_read():
    body = b"\x03ab\x01\x04xyz"
    tags = b"\x03" + b"\x00\x08" + (9).to_bytes(8, "big") + b"\x02\x01z" + b"\x03\x01\x05"
    decoded = Toy.decode(body + tags, 2)
    assert (decoded.epoch, decoded.flag) == (9, 5)


def test_a_tag_with_extra_bytes_is_refused():
    with pytest.raises(DecodeError, match="extra bytes"):
        Toy.decode(b"\x03ab\x01\x04xyz" + b"\x01\x03\x02\x05\x05", 2)


def test_null_where_the_version_does_not_allow_it():
    with pytest.raises(EncodeError, match="Toy.name"):
        encode(Toy(name=None), 0)
    assert Toy.decode(encode(Toy(name=None), 1), 1).name is None


def test_encode_errors_name_the_field_path():
    with pytest.raises(EncodeError, match=r"Toy.points: Point.x"):
        encode(Toy(name="", points=[Point(x=2**40)]), 1)
    with pytest.raises(EncodeError, match=r"Toy.points"):
        encode(Toy(name="", points=None), 1)


def test_undeclared_versions_are_refused():
    with pytest.raises(DecodeError):
        Toy.decode(b"", 3)
    with pytest.raises(EncodeError):
        encode(Toy(), 3)


def test_adjacent_fixed_fields_are_read_with_one_struct():
    codec = fetch.FetchPartition.codec(11, False)
    request = fetch.FetchPartition(partition=1, current_leader_epoch=2, fetch_offset=3,
                                   log_start_offset=4, partition_max_bytes=5)  # fmt: skip
    out = bytearray()
    codec.write(out, request)
    assert len(out) == 4 + 4 + 8 + 8 + 4 and codec.min_bytes == len(out)
    assert codec.read(bytes(out), 0) == (request, len(out))


def test_equality_and_repr():
    assert Point(x=1) == Point(x=1) and Point(x=1) != Point(x=2)
    assert repr(Point(x=1)) == "Point(x=1, y=-1)"
    assert "3 bytes" in repr(Toy.decode(encode(Toy(name="", blob=b"abc"), 0), 0))
