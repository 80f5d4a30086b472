"""The consumer group's embedded protocol: what members put in JoinGroup and SyncGroup.

The group coordinator treats these bytes as opaque; consumers agree on them among themselves.
A member's *subscription* travels in JoinGroup's ``protocols[].metadata`` (one copy per
assignor it offers) and reaches the leader in ``members[].metadata``; the leader's
*assignment* travels in SyncGroup's ``assignments[].assignment`` and reaches each member as
SyncGroup's ``assignment``. The layouts are Kafka's ``ConsumerProtocolSubscription`` and
``ConsumerProtocolAssignment`` (versions 0-3, never flexible), each preceded by an int16
version:

- Subscription: ``topics []string``, ``user_data nullable bytes``, v1+ ``owned_partitions
  [](topic, []int32)`` (KIP-429), v2+ ``generation_id int32`` (-1: none), v3+ ``rack_id
  nullable string``.
- Assignment: ``assigned_partitions [](topic, []int32)``, ``user_data nullable bytes``; the
  same layout in every version.

Decoding is lenient the way Kafka's is: a version newer than 3 is read as 3 (new versions may
only append fields), and bytes after the last known field are ignored. The appliance and
``klog groups describe`` use this module too, to show what members subscribe to and own.

Pure: bytes in, tuples out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from klog.protocol.exceptions import DecodeError
from klog.protocol.fieldtypes import BYTES, INT32, STRING, Array
from klog.protocol.primitives import INT16
from klog.protocol.schema import Field, Message, Struct

__all__ = [
    "HIGHEST_VERSION",
    "PROTOCOL_TYPE",
    "Assignment",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

PROTOCOL_TYPE = "consumer"  # JoinGroup's protocol_type for every Kafka consumer
HIGHEST_VERSION = 3

Partitions = dict[str, list[int]]  # topic -> partition numbers, as on the wire


class TopicPartition(Struct):  # Kafka's name for the nested struct in both schemas
    topic = Field(STRING)
    partitions = Field(Array(INT32))


class ConsumerProtocolSubscription(Message, versions="0-3"):
    topics = Field(Array(STRING))
    user_data = Field(BYTES, nullable="0+", default=None)
    owned_partitions = Field(Array(TopicPartition), "1+")
    generation_id = Field(INT32, "2+", default=-1)
    rack_id = Field(STRING, "3+", nullable="3+", default=None)


class ConsumerProtocolAssignment(Message, versions="0-3"):
    assigned_partitions = Field(Array(TopicPartition))
    user_data = Field(BYTES, nullable="0+", default=None)


class Subscription(NamedTuple):
    """A member's subscription as decoded; ``owned_partitions`` maps topic -> partitions."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: Partitions = {}  # a shared default: never mutated
    generation_id: int = -1
    rack_id: str | None = None
    version: int = HIGHEST_VERSION


class Assignment(NamedTuple):
    """A member's assignment as decoded: topic -> partition numbers, and the user data."""

    partitions: Partitions
    user_data: bytes | None = None
    version: int = HIGHEST_VERSION


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None,
                        owned_partitions: Any = (), *, generation_id: int = -1,
                        rack_id: str | None = None, version: int = HIGHEST_VERSION) -> bytes:
    """The subscription bytes. ``owned_partitions``: a mapping topic -> partitions or
    ``(topic, partition)`` pairs (dropped below v1, as are generation_id below v2 and rack_id
    below v3). Topics are written sorted, owned partitions grouped by topic and sorted, so the
    same subscription always gives the same bytes."""
    body = ConsumerProtocolSubscription(
        topics=sorted(set(topics)), user_data=user_data,
        owned_partitions=_to_wire(owned_partitions), generation_id=generation_id,
        rack_id=rack_id)
    return _encode(body, version)


def encode_assignment(assignment: Any, user_data: bytes | None = None, *,
                      version: int = HIGHEST_VERSION) -> bytes:
    """The assignment bytes; ``assignment``: a mapping topic -> partitions or ``(topic,
    partition)`` pairs."""
    body = ConsumerProtocolAssignment(assigned_partitions=_to_wire(assignment),
                                      user_data=user_data)
    return _encode(body, version)


def decode_subscription(data: Any) -> Subscription:
    """A subscription from its bytes (any version; see the module docstring). Raises
    DecodeError when the bytes end before a known field does."""
    body, version = _decode(ConsumerProtocolSubscription, data)
    return Subscription(list(body.topics), _bytes(body.user_data),
                        _from_wire(body.owned_partitions), body.generation_id, body.rack_id,
                        version)


def decode_assignment(data: Any) -> Assignment:
    """An assignment from its bytes. Empty bytes (what a coordinator hands a member the leader
    left out, or a failed rebalance) decode as the empty assignment."""
    if len(data) == 0:
        return Assignment({}, None, 0)
    body, version = _decode(ConsumerProtocolAssignment, data)
    return Assignment(_from_wire(body.assigned_partitions), _bytes(body.user_data), version)


def _encode(body: Message, version: int) -> bytes:
    if version not in type(body).versions:
        raise ValueError(f"{type(body).__name__} has versions 0-{HIGHEST_VERSION}, not {version}")
    out = bytearray(INT16.pack(version))
    body.encode_into(out, version)
    return bytes(out)


def _decode(cls: Any, data: Any) -> tuple[Any, int]:
    buf = memoryview(data)
    if len(buf) < 2:
        raise DecodeError(f"{cls.__name__}: {len(buf)} bytes, no version")
    (version,) = INT16.unpack_from(buf, 0)
    if version < 0:
        raise DecodeError(f"{cls.__name__}: negative version {version}")
    version = min(version, HIGHEST_VERSION)
    body, _ = cls.codec(version, False).read(buf, 2)  # trailing bytes: a newer peer's fields
    return body, version


def _to_wire(partitions: Any) -> list[TopicPartition]:
    grouped: dict[str, set[int]] = {}
    items = partitions.items() if isinstance(partitions, Mapping) else None
    if items is not None:
        for topic, numbers in items:
            grouped.setdefault(topic, set()).update(numbers)
    else:
        for topic, number in partitions:
            grouped.setdefault(topic, set()).add(number)
    return [TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in sorted(grouped.items())]


def _from_wire(items: list) -> Partitions:
    out: Partitions = {}
    for item in items:
        out.setdefault(item.topic, []).extend(item.partitions)
    return out


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)
