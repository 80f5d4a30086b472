"""The control channel's messages and wire format: length-prefixed orjson over a Unix socketpair.

One socketpair per worker, made before the fork. Workers ask (`CreateTopic`, `DeleteTopic`,
`CreatePartitions`, `AllocateProducerId`, `AlterPartition`, `CreateAcls`, `DeleteAcls`,
`AlterScram`) and get one `Reply` per request, in order, matched by the request's `id`; they
also say `Ready` once they serve. The supervisor starts each worker's stream with the whole
`Catalog` (and the cluster id; with an authorizer, the ACL set `Acls` just before it, and in a
fleet the SCRAM users `ScramUsers` read from ZooKeeper), then broadcasts every change
(`TopicChanged`, or `PartitionsChanged` for some partitions of a known topic, `TopicDeleted`,
`Reload`, `Acls`: the whole ACL set after each change, and in cluster mode `Fleet`: the live
nodes, the controller and the nodes' dynamic configs, and `ScramUsers` after each change of
the fleet's users) to every worker. A worker that asked for
a change sees the broadcast before the reply, so when its request returns, it already follows
the new catalog.

Each message is a frozen dataclass; on the wire it is one JSON object: its class name under
"type" and its fields, each written and read by the codec of its declared type (`_CODECS`).

Rules: a malformed message is a bug on our side, never user input: the end that reads it
raises `ControlChannelError` (an unknown type, a missing, extra or ill-typed field), and the
connection is dropped (the supervisor then restarts that worker).
"""

from __future__ import annotations

import base64
import dataclasses
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

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

PREFIX = struct.Struct(">I")  # body length, big-endian, as Kafka frames its requests
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ControlChannelError(ConnectionError):
    """The other end of the control channel is gone or sent something unreadable."""


# worker -> supervisor: requests, each answered by one Reply with its id ---------------------
# `id` is the channel's: the client numbers a request as it sends it.


@dataclass(frozen=True)
class CreateTopic:
    name: str
    partitions: int  # -1: the controller's default
    replication_factor: int  # -1: the controller's default
    configs: dict[str, str]
    validate_only: bool
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class DeleteTopic:
    name: str
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class CreatePartitions:
    name: str
    count: int  # the new total
    validate_only: bool
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class AllocateProducerId:
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class AlterPartition:
    """Kafka's AlterPartition: the leader of `topic`-`partition` in `leader_epoch` asks for
    its ISR to become `isr`. Which node leads is the channel's to say, not the request's."""

    topic: str
    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class CreateAcls:
    """Add these ACLs (already checked valid by the worker); the supervisor writes its file
    and broadcasts the new set before it replies."""

    acls: tuple[AclBinding, ...]
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class DeleteAcls:
    """Remove the ACLs any of these filters match; the reply's `acls` are those removed."""

    filters: tuple[AclFilter, ...]
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class AlterScram:
    """Store or remove these SCRAM credentials (AlterUserScramCredentials, already checked by
    the worker): alone in the appliance's file, in a fleet in ZooKeeper."""

    changes: tuple[ScramChange, ...]
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class AlterTopicConfigs:
    """Replace the topic's config overrides by `configs` (AlterConfigs, the worker merged
    an incremental change already); checked again by the decider."""

    name: str
    configs: dict[str, str]
    validate_only: bool = False
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class AlterDynamicConfigs:
    """Change one entity of the dynamic config store (appliance.control.dynamic_configs):
    `changes` maps keys to new values, None removes one. Checked by the worker already."""

    entity_type: str
    name: str
    changes: dict[str, str | None]
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class ClusterAdmin:
    """Cluster mode: an admin request for the fleet (`cluster/admin_requests.py`: "elect",
    "alter_reassignments", "list_reassignments"), its arguments and the reply's `message`
    as JSON, so new admin requests need no new message."""

    op: str
    args: str
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class Ready:
    """The worker serves (no reply)."""


# supervisor -> worker: replies and broadcasts ------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """The answer to the request with the same `id`: its error code, the message of a topic
    request's refusal, the id an AllocateProducerId got (-1: none can be had now)."""

    id: int
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    producer_id: int = -1
    acls: tuple[AclBinding, ...] = ()  # DeleteAcls: the ACLs removed


@dataclass(frozen=True)
class Catalog:
    """Every topic, first on a worker's stream."""

    cluster_id: str
    topics: tuple[TopicInfo, ...]


@dataclass(frozen=True)
class TopicChanged:
    """A topic was created or changed (partitions added, leadership moved)."""

    info: TopicInfo


@dataclass(frozen=True)
class PartitionsChanged:
    """Cluster mode: some partitions of a topic the workers know changed their leadership
    (leader, epoch, replicas, ISR) or owner here, and nothing else of the topic did: the new
    state of each. A change of a few partitions of a large topic then costs those partitions
    on the channel and in every worker, not the whole topic: a controller's failover rewrites
    every partition an appliance held, 200 to a note, and with one topic of 10,000
    partitions each note sent every worker all 10,000 (`TopicInfo.with_partitions`)."""

    name: str
    indexes: tuple[int, ...]
    owners: tuple[int, ...]
    leadership: tuple[PartitionLeadership, ...]


@dataclass(frozen=True)
class TopicDeleted:
    name: str


@dataclass(frozen=True)
class Reload:
    """The settings a SIGHUP reloaded that workers apply to new decisions."""

    log_defaults: LogConfig
    num_partitions: int
    log_retention_check_interval_ms: int


@dataclass(frozen=True)
class Fleet:
    """Cluster mode: the live nodes, the controller's node id and the nodes' dynamic configs
    (/config/brokers/<node>)."""

    controller_id: int
    nodes: tuple[FleetNode, ...]
    node_configs: dict[int, dict[str, str]]


@dataclass(frozen=True)
class Acls:
    """Every ACL in force: sent before the catalog, and again after each change."""

    acls: tuple[AclBinding, ...]


@dataclass(frozen=True)
class DynamicConfigs:
    """Every entity of the dynamic config store (type -> name -> configs): sent before the
    catalog, and again after each change."""

    entities: dict[str, dict[str, dict[str, str]]]


@dataclass(frozen=True)
class ScramUsers:
    """A fleet's SCRAM users (salted credentials, never a password), from ZooKeeper: sent
    before the catalog, and again after each change."""

    users: dict[str, dict[str, ScramCredential]]


Request = (CreateTopic | DeleteTopic | CreatePartitions | AllocateProducerId | AlterPartition
           | CreateAcls | DeleteAcls | AlterScram | AlterTopicConfigs | AlterDynamicConfigs
           | ClusterAdmin)
Message = (Request | Ready | Reply | Catalog | TopicChanged | PartitionsChanged | TopicDeleted
           | Reload | Fleet
           | Acls | ScramUsers | DynamicConfigs)


# the codec -----------------------------------------------------------------------------------


def _exactly(kind: type) -> Callable[[Any], Any]:
    def check(value):
        if type(value) is not kind:  # so neither True for an int nor 1 for a bool
            raise TypeError(f"{value!r} is not {kind.__name__}")
        return value
    return check


_int, _str, _bool = _exactly(int), _exactly(str), _exactly(bool)


def _strings(raw) -> dict[str, str]:
    return {_str(k): _str(v) for k, v in raw.items()}


def _node(raw) -> FleetNode:
    node_id, host, port, rack, *endpoints = raw
    return FleetNode(_int(node_id), _str(host), _int(port), None if rack is None else _str(rack),
                     tuple((_str(n), _str(h), _int(p)) for n, h, p in
                           (endpoints[0] if endpoints else ())))


def _as_is(value):
    return value


def _acl_filter_to_wire(f: AclFilter) -> list:
    return [int(f.resource_type), f.resource_name, int(f.pattern_type), f.principal, f.host,
            int(f.operation), int(f.permission)]


def _acl_filter(raw) -> AclFilter:
    rtype, name, pattern, principal, host, operation, permission = raw

    def text(value):
        return None if value is None else _str(value)

    return AclFilter(ResourceType(_int(rtype)), text(name), PatternType(_int(pattern)),
                     text(principal), text(host), Operation(_int(operation)),
                     Permission(_int(permission)))


def _credential_to_wire(c: ScramCredential) -> list:
    return [base64.b64encode(c.salt).decode(), c.iterations,
            base64.b64encode(c.stored_key).decode(), base64.b64encode(c.server_key).decode()]


def _credential(raw) -> ScramCredential:
    salt, iterations, stored_key, server_key = raw
    return ScramCredential(base64.b64decode(_str(salt)), _int(iterations),
                           base64.b64decode(_str(stored_key)), base64.b64decode(_str(server_key)))


def _change(raw) -> ScramChange:
    user, mechanism, credential = raw
    return ScramChange(_str(user), _str(mechanism),
                       None if credential is None else _credential(credential))


# declared field type -> (to the JSON value, from it); a field's type missing here fails at import
_CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "int": (_as_is, _int),
    "str": (_as_is, _str),
    "bool": (_as_is, _bool),
    "str | None": (_as_is, lambda raw: None if raw is None else _str(raw)),
    "dict[str, str]": (_as_is, _strings),
    "dict[str, str | None]": (_as_is, lambda raw: {_str(k): None if v is None else _str(v)
                                                   for k, v in raw.items()}),
    "dict[str, dict[str, dict[str, str]]]": (
        _as_is, lambda raw: {_str(t): {_str(n): _strings(c) for n, c in names.items()}
                             for t, names in raw.items()}),
    "tuple[int, ...]": (list, lambda raw: tuple(_int(v) for v in raw)),
    "ErrorCode": (int, lambda raw: ErrorCode(_int(raw))),
    "TopicInfo": (TopicInfo.to_dict, TopicInfo.from_dict),
    "tuple[PartitionLeadership, ...]": (
        lambda states: [state.to_list() for state in states],
        lambda raw: tuple(PartitionLeadership.from_list(state) for state in raw)),
    "tuple[TopicInfo, ...]": (lambda topics: [t.to_dict() for t in topics],
                              lambda raw: tuple(TopicInfo.from_dict(t) for t in raw)),
    "tuple[FleetNode, ...]": (lambda nodes: [[n.node_id, n.host, n.port, n.rack,
                                              [list(e) for e in n.endpoints]] for n in nodes],
                              lambda raw: tuple(_node(n) for n in raw)),
    "dict[int, dict[str, str]]": (lambda configs: [[n, c] for n, c in configs.items()],
                                  lambda raw: {_int(n): _strings(c) for n, c in raw}),
    "tuple[AclBinding, ...]": (lambda acls: [a.to_dict() for a in acls],
                               lambda raw: tuple(AclBinding.from_dict(a) for a in raw)),
    "tuple[AclFilter, ...]": (lambda filters: [_acl_filter_to_wire(f) for f in filters],
                              lambda raw: tuple(_acl_filter(f) for f in raw)),
    "dict[str, dict[str, ScramCredential]]": (
        lambda users: {u: {m: _credential_to_wire(c) for m, c in by_mechanism.items()}
                       for u, by_mechanism in users.items()},
        lambda raw: {_str(u): {_str(m): _credential(c) for m, c in by_mechanism.items()}
                     for u, by_mechanism in raw.items()}),
    "tuple[ScramChange, ...]": (
        lambda changes: [[c.user, c.mechanism, None if c.credential is None
                          else _credential_to_wire(c.credential)] for c in changes],
        lambda raw: tuple(_change(c) for c in raw)),
    "LogConfig": (LogConfig.to_kafka, lambda raw: LogConfig.from_kafka(_strings(raw))),
}

MESSAGE_TYPES: dict[str, type] = {kind.__name__: kind for kind in Message.__args__}
_LAYOUTS = {kind: [(f.name, *_CODECS[f.type]) for f in dataclasses.fields(kind)]
            for kind in MESSAGE_TYPES.values()}


def encode(message: Message) -> bytes:
    fields = {"type": type(message).__name__}
    for name, to_wire, _ in _LAYOUTS[type(message)]:
        fields[name] = to_wire(getattr(message, name))
    body = orjson.dumps(fields)
    return PREFIX.pack(len(body)) + body


def decode(raw: Any) -> Message:
    """The message a JSON body holds; raises ControlChannelError if it holds none."""
    name = raw.get("type") if isinstance(raw, dict) else None
    kind = MESSAGE_TYPES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ControlChannelError(f"unknown control message {str(raw)[:100]}")
    layout = _LAYOUTS[kind]
    extra = raw.keys() - {name for name, _, _ in layout} - {"type"}
    if extra:
        raise ControlChannelError(f"{kind.__name__} control message has {sorted(extra)}")
    try:
        return kind(**{name: from_wire(raw[name]) for name, _, from_wire in layout})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ControlChannelError(f"unreadable {kind.__name__} control message: "
                                  f"{type(exc).__name__} {exc}") from None


class MessageReader:
    """Splits a byte stream into messages (sans-IO: feed bytes, take messages)."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def messages(self) -> Iterator[Message]:
        while len(self._buffer) >= PREFIX.size:
            (size,) = PREFIX.unpack_from(self._buffer)
            if size > MAX_MESSAGE_BYTES:
                raise ControlChannelError(f"control message of {size} bytes is too large")
            if len(self._buffer) < PREFIX.size + size:
                return
            body = bytes(self._buffer[PREFIX.size : PREFIX.size + size])
            del self._buffer[: PREFIX.size + size]
            try:
                raw = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ControlChannelError(f"unreadable control message: {exc}") from None
            yield decode(raw)
