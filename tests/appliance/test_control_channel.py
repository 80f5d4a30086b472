"""The control channel's codec: every message, both directions, through `encode` and
`MessageReader`, fed whole and byte by byte; and what a reader refuses."""

from __future__ import annotations

import orjson
import pytest

from appliance.control.channel import (
    MAX_MESSAGE_BYTES,
    MESSAGE_TYPES,
    PREFIX,
    Acls,
    AllocateProducerId,
    AlterDynamicConfigs,
    AlterPartition,
    AlterScram,
    AlterTopicConfigs,
    Catalog,
    ClusterAdmin,
    ControlChannelError,
    CreateAcls,
    CreatePartitions,
    CreateTopic,
    DeleteAcls,
    DeleteTopic,
    DynamicConfigs,
    Fleet,
    MessageReader,
    PartitionsChanged,
    Ready,
    Reload,
    Reply,
    ScramUsers,
    TopicChanged,
    TopicDeleted,
    encode,
)
from appliance.control.topics import FleetNode, PartitionLeadership, TopicInfo
from appliance.scram_credentials import ScramChange
from appliance.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl.scram import ScramCredential

CREDENTIAL = ScramCredential(b"salt", 4096, b"stored", b"server")
ALONE = TopicInfo(name="orders", owners=(0, 1, 0), configs={"retention.ms": "60000"})
REPLICATED = TopicInfo(name="__consumer_offsets", owners=(2, -1), internal=True,
                       leadership=(PartitionLeadership(102, 4, (102, 201, 301), (102, 201)),
                                   PartitionLeadership(-1, 7, (201, 301), ())))

WRITE_A = AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                     Operation.WRITE, Permission.ALLOW)
DENY_PREFIX = AclBinding(ResourceType.TOPIC, "b-", PatternType.PREFIXED, "User:*",
                         "10.0.0.1", Operation.ALL, Permission.DENY)

MESSAGES = [
    CreateAcls((WRITE_A, DENY_PREFIX), id=7),
    DeleteAcls((AclFilter(), AclFilter(ResourceType.TOPIC, "b-1", PatternType.MATCH,
                                       "User:*", None, Operation.READ, Permission.ALLOW)), id=8),
    Reply(8, acls=(WRITE_A,)),
    Acls((WRITE_A, DENY_PREFIX)),
    Acls(()),
    ScramUsers({"alice": {"SCRAM-SHA-512": CREDENTIAL, "SCRAM-SHA-256": CREDENTIAL}}),
    ScramUsers({}),
    AlterScram((ScramChange("bob", "SCRAM-SHA-256", CREDENTIAL),
                ScramChange("carol", "SCRAM-SHA-512", None)), id=9),
    CreateTopic("orders", 3, -1, {"retention.ms": "60000"}, False, id=1),
    CreateTopic("t", -1, 3, {}, True, id=2),
    DeleteTopic("orders", id=3),
    CreatePartitions("orders", 12, True, id=4),
    AllocateProducerId(id=5),
    AlterPartition("orders", 2, 17, (101, 201, 301), id=6),
    ClusterAdmin("elect", '{"partitions":null,"unclean":false}', id=10),
    Reply(10, message='{"results":[["orders",0,0,null]]}'),
    Ready(),
    Reply(1),
    Reply(2, ErrorCode.TOPIC_ALREADY_EXISTS, "topic 't' already exists"),
    Reply(5, producer_id=4000),
    Reply(6, ErrorCode.FENCED_LEADER_EPOCH),
    Catalog("abcdefghijklmnopqrstuv", (ALONE, REPLICATED)),
    Catalog("", ()),
    TopicChanged(ALONE),
    TopicChanged(REPLICATED),
    PartitionsChanged("__consumer_offsets", (1,), (0,),
                      (PartitionLeadership(201, 8, (201, 301), (201,)),)),
    TopicDeleted("orders"),
    Reload(LogConfig(segment_bytes=1 << 20, retention_ms=60_000), 6, 30_000),
    Fleet(100, (FleetNode(100, "10.0.0.1", 9092, "rack-a"),
                FleetNode(201, "10.0.0.2", 9093, None,
                          (("CLIENT", "10.0.0.2", 9093), ("REPLICATION", "10.1.0.2", 9193)))),
          {100: {"leader.replication.throttled.rate": "1048576"}}),
    Fleet(-1, (), {}),
    AlterTopicConfigs("orders", {"retention.ms": "1000"}, True, id=10),
    AlterDynamicConfigs("users/alice/clients", "<default>",
                        {"producer_byte_rate": "1024", "consumer_byte_rate": None}, id=11),
    DynamicConfigs({"brokers": {"<default>": {"log.retention.ms": "1000"}},
                    "users": {"alice": {"producer_byte_rate": "1024"}}}),
    DynamicConfigs({}),
]


def test_every_message_type_is_covered():
    assert {type(m) for m in MESSAGES} == set(MESSAGE_TYPES.values())


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_round_trips_fed_whole(message):
    reader = MessageReader()
    reader.feed(encode(message))
    assert list(reader.messages()) == [message]


def test_every_message_round_trips_fed_byte_by_byte():
    reader = MessageReader()
    got = []
    for byte in b"".join(encode(m) for m in MESSAGES):
        reader.feed(bytes([byte]))
        got += reader.messages()
    assert got == MESSAGES


def test_a_partial_message_waits_for_its_end():
    data = encode(AlterPartition("t", 0, 1, (1,), id=9))
    reader = MessageReader()
    reader.feed(data[:-1])
    assert list(reader.messages()) == []
    reader.feed(data[-1:])
    assert list(reader.messages()) == [AlterPartition("t", 0, 1, (1,), id=9)]


def framed(raw) -> bytes:
    body = orjson.dumps(raw)
    return PREFIX.pack(len(body)) + body


def read(data: bytes):
    reader = MessageReader()
    reader.feed(data)
    return list(reader.messages())


def wire(message) -> dict:
    return orjson.loads(encode(message)[PREFIX.size:])


@pytest.mark.parametrize("raw", [
    {"type": "Explode"},
    {"op": "reply", "id": 1},  # the old dict format
    {"type": ["Ready"]},
    [1, 2],
    "Ready",
], ids=["unknown type", "no type", "unhashable type", "a list", "a string"])
def test_an_unknown_type_is_refused(raw):
    with pytest.raises(ControlChannelError, match="unknown control message"):
        read(framed(raw))


def test_a_missing_field_is_refused():
    raw = wire(AlterPartition("t", 0, 1, (1, 2), id=3))
    del raw["isr"]
    with pytest.raises(ControlChannelError, match="AlterPartition"):
        read(framed(raw))


def test_an_extra_field_is_refused():
    raw = {**wire(DeleteTopic("t", id=1)), "op": "delete_topic"}
    with pytest.raises(ControlChannelError, match="DeleteTopic"):
        read(framed(raw))


@pytest.mark.parametrize(("message", "field", "value"), [
    (AlterPartition("t", 0, 1, (1,), id=1), "isr", [1, "2"]),
    (AlterPartition("t", 0, 1, (1,), id=1), "partition", True),
    (CreateTopic("t", 1, 1, {}, False, id=1), "validate_only", 0),
    (CreateTopic("t", 1, 1, {}, False, id=1), "configs", {"a": 1}),
    (Reply(1), "error", 99999),  # no such error code
    (TopicChanged(ALONE), "info", {"name": "t"}),
    (PartitionsChanged("t", (0,), (0,), (PartitionLeadership(1, 0, (1,), (1,)),)),
     "leadership", [[1, 0, [1]]]),
    (Fleet(-1, (), {}), "nodes", [[1, "h", 9092]]),
    (Reload(LogConfig(), 1, 1), "log_defaults", {"no.such.key": "1"}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_an_ill_typed_field_is_refused(message, field, value):
    raw = {**wire(message), field: value}
    with pytest.raises(ControlChannelError, match=type(message).__name__):
        read(framed(raw))


def test_unreadable_json_and_oversized_frames_are_refused():
    with pytest.raises(ControlChannelError, match="unreadable"):
        read(PREFIX.pack(3) + b"{x}")
    with pytest.raises(ControlChannelError, match="too large"):
        read(PREFIX.pack(MAX_MESSAGE_BYTES + 1))


def test_a_supervisor_gone_with_bytes_unread_is_a_channel_error_for_the_worker():
    """Its socket then answers ECONNRESET, which the worker's reader callback must see as the
    channel's end (it stops), not as an exception asyncio logs with a traceback."""
    import socket

    from appliance.config import BrokerConfig
    from appliance.control.client import ControlPlaneClient
    worker_end, supervisor_end = socket.socketpair()
    client = ControlPlaneClient(worker_end, defaults=BrokerConfig().log_defaults,
                                default_partitions=1)
    worker_end.sendall(b"unread by the supervisor")
    supervisor_end.close()
    worker_end.setblocking(False)
    with pytest.raises(ControlChannelError):
        client.pump()
    worker_end.close()
