"""The embedded ConsumerProtocol codec (subscriptions and assignments inside JoinGroup and
SyncGroup): against Kafka's schema and two other clients' own classes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from klog.protocol.group_assignment import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from klog.types import TopicPartition

TP = TopicPartition


def test_subscription_round_trips_and_drops_what_a_version_lacks():
    for version in range(4):
        data = encode_subscription(["b", "a"], b"u", {"a": [1, 0]}, generation_id=7,
                                   rack_id="r1", version=version)
        sub = decode_subscription(data)
        assert (sub.version, sub.topics, sub.user_data) == (version, ["a", "b"], b"u")
        assert sub.owned_partitions == ({"a": [0, 1]} if version >= 1 else {})
        assert sub.generation_id == (7 if version >= 2 else -1)
        assert sub.rack_id == ("r1" if version >= 3 else None)


def test_decoding_is_lenient_like_kafka():
    data = encode_subscription(["t"], None, [("t", 2)], generation_id=3)
    newer = struct.pack(">h", 9) + data[2:] + b"\x00\x00\x00\x05future"
    sub = decode_subscription(newer)
    assert (sub.version, sub.topics, sub.owned_partitions, sub.generation_id) == (
        3, ["t"], {"t": [2]}, 3)
    assert decode_assignment(encode_assignment({"t": [0]}) + b"junk").partitions == {"t": [0]}
    assert decode_assignment(b"").partitions == {}  # what a member left out receives


def test_declarations_match_kafkas_schema():
    """Kafka's ConsumerProtocol*.json travel with kafka-python; read them at test time."""
    kafka = pytest.importorskip("kafka")
    from tests.protocol.test_schema_vs_kafka import kafka_fields, our_fields

    resources = Path(kafka.__file__).parent / "protocol" / "schemas" / "resources"
    for cls in (ConsumerProtocolSubscription, ConsumerProtocolAssignment):
        text = "\n".join(line for line in (resources / f"{cls.__name__}.json").read_text()
                         .splitlines() if not line.lstrip().startswith("//"))
        schema = json.loads(text)
        assert schema["validVersions"] == "0-3" and schema["flexibleVersions"] == "none"
        for version in range(4):
            expected = kafka_fields(schema["fields"], version, False, {})
            assert our_fields(cls, version, False, expected) == expected, (cls, version)


def test_kafka_python_and_ours_read_each_other():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSub

    for version in range(4):
        theirs = KSub(version=version, topics=["x", "y"], user_data=b"ud", owned_partitions=[
            KSub.TopicPartition(topic="x", partitions=[3, 1])], generation_id=5, rack_id="r")
        sub = decode_subscription(theirs.encode())
        assert (sub.version, sub.topics, sub.user_data) == (version, ["x", "y"], b"ud")
        assert sub.owned_partitions == ({"x": [3, 1]} if version else {})
        back = KSub.decode(encode_subscription(["x"], None, [("x", 2)], generation_id=4,
                                               version=version))
        assert list(back.topics) == ["x"] and back.user_data is None
        if version >= 1:
            assert [(tp.topic, list(tp.partitions)) for tp in back.owned_partitions] == [
                ("x", [2])]
    theirs = KAssignment(version=1, assigned_partitions=[
        KAssignment.TopicPartition(topic="t", partitions=[0, 2])], user_data=None)
    assert decode_assignment(theirs.encode()).partitions == {"t": [0, 2]}
    assert [(tp.topic, list(tp.partitions)) for tp in KAssignment.decode(
        encode_assignment({"t": [4]}, b"x")).assigned_partitions] == [("t", [4])]


def test_aiokafka_and_ours_read_each_other():
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    theirs = ConsumerProtocolMemberMetadata(0, ["a", "b"], b"").encode()
    assert decode_subscription(theirs).topics == ["a", "b"]
    ours = ConsumerProtocolMemberMetadata.decode(
        encode_subscription(["a"], None, [("a", 1)], generation_id=2))  # v3: extra bytes
    assert list(ours.subscription) == ["a"]
    assigned = ConsumerProtocolMemberAssignment(0, [("t", [1, 2])], b"").encode()
    assert decode_assignment(assigned).partitions == {"t": [1, 2]}
    back = ConsumerProtocolMemberAssignment.decode(encode_assignment({"t": [5]}))
    assert back.partitions() == [pytest.importorskip("aiokafka").TopicPartition("t", 5)]
