"""The znodes of a klog fleet: their paths and their JSON, Kafka's own where Kafka has one.

Pure: bytes in, frozen dataclasses out, and back. A payload that does not parse raises
`ZnodeError` naming the path, so a hand-edited or foreign node is reported, never guessed at.
The whole layout is described in the package docstring (`cluster/__init__.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import orjson

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
TOPIC_CONFIGS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
BROKER_CONFIGS = "/config/brokers"
APPLIANCES = "/klog/appliances"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONTROLLED_SHUTDOWN = "/klog/controlled_shutdown"
STATE_CHANGES = "/klog/state_changes"  # the controller's notes of states written

PERSISTENT_ROOTS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, DELETE_TOPICS, APPLIANCES, "/cluster",
                    CONTROLLED_SHUTDOWN, STATE_CHANGES)


class ZnodeError(ValueError):
    """A znode's content is not what klog (or Kafka) writes there."""


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def appliance_path(broker_id: int) -> str:
    return f"{APPLIANCES}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def delete_request_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def shutdown_request_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


def broker_config_path(node_id: int) -> str:
    return f"{BROKER_CONFIGS}/{node_id}"


def _load(data: bytes, path: str) -> dict:
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ZnodeError(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ZnodeError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    return raw


def _dump(raw: dict) -> bytes:
    return orjson.dumps(raw)


@dataclass(frozen=True)
class BrokerRegistration:
    """`/brokers/ids/<node>` (ephemeral), Kafka's version 5 JSON: one per serving worker.

    `endpoints` are (listener name, security protocol, host, port), written as Kafka writes
    them (`endpoints` and `listener_security_protocol_map`; `host`/`port` the PLAINTEXT one,
    or null and -1 without one). Without endpoints, `host`/`port` is a PLAINTEXT listener, as
    before several listeners. Decoded, `host`/`port` are the PLAINTEXT endpoint's, else the
    first endpoint's."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, str, int], ...] = ()

    def encode(self) -> bytes:
        endpoints = self.endpoints or (("PLAINTEXT", "PLAINTEXT", self.host, self.port),)
        plaintext = next(((h, p) for _, protocol, h, p in endpoints
                          if protocol == "PLAINTEXT"), (None, -1))
        return _dump({"version": 5, "host": plaintext[0], "port": plaintext[1],
                      "endpoints": [f"{name}://{_bracketed(h)}:{p}"
                                    for name, _, h, p in endpoints],
                      "rack": self.rack, "jmx_port": -1,
                      "timestamp": str(int(time.time() * 1000)),
                      "listener_security_protocol_map": {name: protocol for name, protocol, _, _
                                                         in endpoints}})

    @classmethod
    def decode(cls, node_id: int, data: bytes, path: str) -> BrokerRegistration:
        raw = _load(data, path)
        try:
            endpoints = _endpoints(raw)
            host, port = raw.get("host"), raw.get("port", -1)
            if host is None and endpoints:
                host, port = endpoints[0][2], endpoints[0][3]
            return cls(node_id, str(host), int(port), raw.get("rack"), endpoints)
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a broker registration: {exc}") from None


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _endpoints(raw: dict) -> tuple[tuple[str, str, str, int], ...]:
    """Kafka's `endpoints` strings with their protocols from `listener_security_protocol_map`
    (default: the name is the protocol)."""
    protocols = raw.get("listener_security_protocol_map") or {}
    found = []
    for text in raw.get("endpoints") or ():
        name, sep, rest = str(text).partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon:
            raise ValueError(f"endpoint {text!r} is not NAME://host:port")
        found.append((name, str(protocols.get(name, name)), host.strip("[]"), int(port)))
    return tuple(found)


@dataclass(frozen=True)
class ApplianceRegistration:
    """`/klog/appliances/<broker.id>` (ephemeral): the appliance as one failure domain."""

    broker_id: int
    rack: str | None
    host: str
    # it writes a note with every partition state (state_changes.py) and follows states by
    # them; the fleet does so only once every live appliance does (a rolling upgrade)
    state_notes: bool = False

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker_id": self.broker_id, "rack": self.rack,
                      "host": self.host, "state_notes": self.state_notes})

    @classmethod
    def decode(cls, data: bytes, path: str) -> ApplianceRegistration:
        raw = _load(data, path)
        try:
            return cls(int(raw["broker_id"]), raw.get("rack"), str(raw["host"]),
                       raw.get("state_notes") is True)
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not an appliance registration: {exc}") from None


@dataclass(frozen=True)
class TopicAssignment:
    """`/brokers/topics/<t>`: the replicas (node ids) of each partition, Kafka's version 2.

    While a partition is reassigned (KIP-455), its replicas are the target's followed by the
    original ones not in the target; `adding` names the target's new replicas, `removing`
    the original ones the target drops. Both are empty (and left out) otherwise."""

    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def listed(by_partition):
            return {str(p): list(r) for p, r in sorted(by_partition.items()) if r}
        return _dump({"version": 2, "partitions": listed(self.partitions),
                      "adding_replicas": listed(self.adding),
                      "removing_replicas": listed(self.removing)})

    @classmethod
    def decode(cls, data: bytes, path: str) -> TopicAssignment:
        raw = _load(data, path)

        def replicas(key: str) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(int(n) for n in nodes)
                    for p, nodes in (raw.get(key) or {}).items() if nodes}
        try:
            return cls({int(p): tuple(int(n) for n in nodes)
                        for p, nodes in raw["partitions"].items()},
                       replicas("adding_replicas"), replicas("removing_replicas"))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ZnodeError(f"{path}: not a topic assignment: {exc}") from None


@dataclass(frozen=True)
class ReassignmentRequest:
    """`/admin/reassign_partitions`: Kafka's version 1 JSON, the target replicas of each
    partition to move, `{"version":1,"partitions":[{"topic","partition","replicas"}]}`.
    Written by `klog cluster reassign --execute`, taken up (and deleted) by the controller."""

    partitions: tuple[tuple[str, int, tuple[int, ...]], ...]

    def encode(self) -> bytes:
        return _dump({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)} for t, p, r in self.partitions]})

    @classmethod
    def decode(cls, data: bytes, path: str = REASSIGN_PARTITIONS) -> ReassignmentRequest:
        raw = _load(data, path)
        try:
            return cls(tuple((str(e["topic"]), int(e["partition"]),
                              tuple(int(n) for n in e["replicas"]))
                             for e in raw["partitions"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a reassignment request: {exc}") from None


@dataclass(frozen=True)
class PartitionState:
    """`/brokers/topics/<t>/partitions/<p>/state`, written by the controller only."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return _dump({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "isr": list(self.isr), "controller_epoch": self.controller_epoch})

    @classmethod
    def decode(cls, data: bytes, path: str) -> PartitionState:
        raw = _load(data, path)
        try:
            return cls(int(raw["leader"]), int(raw["leader_epoch"]),
                       tuple(int(n) for n in raw["isr"]), int(raw["controller_epoch"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a partition state: {exc}") from None


@dataclass(frozen=True)
class TopicConfig:
    """`/config/topics/<t>`: the topic's overrides of the broker defaults. Kafka keeps a
    node's dynamic configs in `/config/brokers/<node>` in the same JSON."""

    config: dict[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _dump({"version": 1, "config": self.config})

    @classmethod
    def decode(cls, data: bytes, path: str) -> TopicConfig:
        raw = _load(data, path)
        config = raw.get("config", {})
        if not isinstance(config, dict):
            raise ZnodeError(f"{path}: config is not an object")
        return cls({str(k): str(v) for k, v in config.items()})


@dataclass(frozen=True)
class ControllerRecord:
    """`/controller` (ephemeral): which appliance controls the fleet."""

    broker_id: int

    def encode(self) -> bytes:
        return _dump({"version": 1, "brokerid": self.broker_id,
                      "timestamp": str(int(time.time() * 1000))})

    @classmethod
    def decode(cls, data: bytes, path: str) -> ControllerRecord:
        raw = _load(data, path)
        try:
            return cls(int(raw["brokerid"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a controller record: {exc}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes, path: str = CLUSTER_ID) -> str:
    raw = _load(data, path)
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise ZnodeError(f"{path}: no cluster id in {raw!r}")
    return raw["id"]


def decode_epoch(data: bytes, path: str = CONTROLLER_EPOCH) -> int:
    try:
        return int(data.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise ZnodeError(f"{path}: not an epoch: {data[:40]!r}") from None


@dataclass(frozen=True)
class ProducerIdBlock:
    """`/latest_producer_id_block`: the last block of producer ids handed out, fleet-wide."""

    broker_id: int
    block_start: int
    block_end: int  # inclusive, as Kafka writes it

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id,
                      "block_start": str(self.block_start), "block_end": str(self.block_end)})

    @classmethod
    def decode(cls, data: bytes, path: str = PRODUCER_ID_BLOCK) -> ProducerIdBlock:
        raw = _load(data, path)
        try:
            return cls(int(raw["broker"]), int(raw["block_start"]), int(raw["block_end"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a producer id block: {exc}") from None


@dataclass(frozen=True)
class ShutdownRequest:
    """`/klog/controlled_shutdown/<broker.id>` (ephemeral): the appliance asks the controller
    to move leadership away from its nodes before it stops (Kafka's ControlledShutdown
    request, as a znode: it goes with the asking appliance's session)."""

    broker_id: int

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker_id": self.broker_id,
                      "timestamp": str(int(time.time() * 1000))})

    @classmethod
    def decode(cls, data: bytes, path: str) -> ShutdownRequest:
        raw = _load(data, path)
        try:
            return cls(int(raw["broker_id"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a controlled shutdown request: {exc}") from None


@dataclass(frozen=True)
class PreferredElection:
    """`/admin/preferred_replica_election`: Kafka's request to move the leadership of these
    partitions to their preferred replica (the first of the assignment)."""

    partitions: tuple[tuple[str, int], ...]

    def encode(self) -> bytes:
        return _dump({"version": 1, "partitions": [{"topic": t, "partition": p}
                                                   for t, p in self.partitions]})

    @classmethod
    def decode(cls, data: bytes, path: str = PREFERRED_REPLICA_ELECTION) -> PreferredElection:
        raw = _load(data, path)
        try:
            return cls(tuple((str(e["topic"]), int(e["partition"])) for e in raw["partitions"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZnodeError(f"{path}: not a preferred replica election: {exc}") from None
