"""What the controller and its workers both speak of: a topic as placed, and a decision's outcome.

Workers import this module (and the client and the channel), never the decisions, the catalog
or the server: they follow what the controller decided, they do not decide.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import orjson

from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode

MAX_TOPIC_NAME = 249
MAX_PARTITIONS_PER_TOPIC = 100_000
INTERNAL_PREFIX = "__"  # Kafka's convention: __consumer_offsets and its kind
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")

# Kafka topic configs that clients send with their default values, which klog honours by doing
# nothing: any other value is refused, because klog would not do what it asks.
DEFAULT_ONLY_CONFIGS = {"compression.type": "producer"}
# Kafka topic configs that are not the log's: a reassignment's replication throttle, which
# the replica fetchers read from the topic's configs (workers/replication_throttle.py)
REPLICATION_CONFIGS = frozenset({"leader.replication.throttled.replicas",
                                 "follower.replication.throttled.replicas"})


class InvalidTopicError(ValueError):
    """A topic name Kafka would refuse."""


def check_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], and not '.' or '..'."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters, the limit is 249")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


@dataclass(frozen=True)
class PartitionLeadership:
    """A partition's replicas and leadership in cluster mode, as the fleet's controller wrote
    them in ZooKeeper (node ids; leader -1: offline)."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    def to_list(self) -> list:
        return [self.leader, self.leader_epoch, list(self.replicas), list(self.isr)]

    @classmethod
    def from_list(cls, raw: list) -> PartitionLeadership:
        leader, epoch, replicas, isr = raw
        return cls(int(leader), int(epoch), tuple(int(r) for r in replicas),
                   tuple(int(r) for r in isr))


@dataclass(frozen=True)
class FleetNode:
    """A live node of the fleet (a worker of some appliance), as Metadata lists it.
    `endpoints` are its (listener name, host, port) as registered; `host`/`port` its default
    one (an endpoint-less node, as before several listeners, has only these)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def on(self, listener: str) -> FleetNode | None:
        """This node at its endpoint of `listener` ("": the default), None when it has no
        such listener (Kafka leaves such brokers out of the answer)."""
        if not listener or not self.endpoints:
            return self
        for name, host, port in self.endpoints:
            if name == listener:
                return FleetNode(self.node_id, host, port, self.rack, self.endpoints)
        return None


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the controller records it. `owners[p]` is the index of the worker of this
    appliance that holds partition p (-1 in cluster mode: no replica here).

    `leadership` is None on an appliance that runs alone (the owner leads while it serves);
    in cluster mode it carries each partition's replicas and leader. `internal` topics
    (`__consumer_offsets`) are written by the appliance itself: clients may neither produce
    to them nor delete them."""

    name: str
    owners: tuple[int, ...]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    leadership: tuple[PartitionLeadership, ...] | None = None

    @property
    def partition_count(self) -> int:
        return len(self.owners)

    def has_partition(self, index: int) -> bool:
        return 0 <= index < len(self.owners)

    def with_partitions(self, indexes: tuple[int, ...], owners: tuple[int, ...],
                        leadership: tuple[PartitionLeadership, ...]) -> TopicInfo:
        """This topic with the owners and states of `indexes` replaced (a `PartitionsChanged`).
        Raises ValueError if they do not fit it (no leadership, an index out of range, lengths
        that differ): the sender's view and ours would disagree."""
        if self.leadership is None or not len(indexes) == len(owners) == len(leadership) or \
                any(not self.has_partition(i) for i in indexes):
            raise ValueError(f"partitions {list(indexes)} do not fit topic {self.name} of "
                             f"{self.partition_count} partitions")
        new_owners, states = list(self.owners), list(self.leadership)
        for index, owner, state in zip(indexes, owners, leadership, strict=True):
            new_owners[index], states[index] = owner, state
        return dataclasses.replace(self, owners=tuple(new_owners), leadership=tuple(states))

    def to_dict(self) -> dict:
        raw = {"name": self.name, "owners": list(self.owners), "configs": self.configs,
               "internal": self.internal}
        if self.leadership is not None:
            raw["leadership"] = [state.to_list() for state in self.leadership]
        return raw

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)

    @classmethod
    def from_dict(cls, raw: dict) -> TopicInfo:
        return cls(
            name=str(raw["name"]),
            owners=tuple(int(o) for o in raw["owners"]),
            configs={str(k): str(v) for k, v in raw.get("configs", {}).items()},
            internal=bool(raw.get("internal", False)),
            leadership=(None if raw.get("leadership") is None else
                        tuple(PartitionLeadership.from_list(s) for s in raw["leadership"])),
        )

    @classmethod
    def from_json(cls, data: bytes, *, source: str) -> TopicInfo:
        try:
            return cls.from_dict(orjson.loads(data))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{source}: not a topic description: {exc}") from None


def changed_partitions(told: TopicInfo | None, now: TopicInfo) -> tuple[int, ...] | None:
    """The partitions whose owner or leadership differ from `told` to `now`, when nothing
    else does and they are at most half of the topic (a `PartitionsChanged` is then the
    smaller message); None: tell the whole topic."""
    if (told is None or told.leadership is None or now.leadership is None
            or told.name != now.name or told.configs != now.configs
            or told.internal != now.internal or len(told.owners) != len(now.owners)):
        return None
    owners = told.owners
    changed = tuple(i for i, (before, after) in enumerate(zip(told.leadership, now.leadership))
                    if before is not after and before != after or owners[i] != now.owners[i])
    return changed if len(changed) * 2 <= len(now.owners) else None


@dataclass(frozen=True)
class TopicResult:
    """The outcome of one create or delete: an error code and a message for the client."""

    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


def topic_log_config(defaults: LogConfig, overrides: dict[str, str]) -> LogConfig:
    """The effective LogConfig of a topic: the broker's defaults, then the topic's overrides.

    Raises ValueError naming a key that is unknown or whose value klog cannot honour."""
    settings = {**defaults.to_kafka()}
    for key, value in overrides.items():
        if key in REPLICATION_CONFIGS:
            continue
        if key in DEFAULT_ONLY_CONFIGS:
            if value != DEFAULT_ONLY_CONFIGS[key]:
                raise ValueError(f"{key}={value} is not supported; klog only does "
                                 f"{key}={DEFAULT_ONLY_CONFIGS[key]}")
            continue
        settings[key] = value
    return LogConfig.from_kafka(settings)


def check_new_topic(name: str, partitions: int, configs: dict[str, str],
                    defaults: LogConfig) -> TopicResult | None:
    """What any controller refuses before deciding anything: a bad name, a partition count
    out of range, a config klog cannot honour. None: acceptable."""
    try:
        check_topic_name(name)
    except InvalidTopicError as exc:
        return TopicResult(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        return TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                           f"number of partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}, "
                           f"got {partitions}")
    try:
        topic_log_config(defaults, configs)
    except ValueError as exc:
        return TopicResult(name, ErrorCode.INVALID_CONFIG, str(exc))
    return None


def check_changeable(name: str, info: TopicInfo | None, change: str) -> TopicResult | None:
    """Refuse a change to a topic that does not exist, or to an internal one (the appliance
    writes those itself; `change` says what was refused). None: acceptable."""
    if info is None:
        return TopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"topic {name!r} does not exist")
    if info.internal:
        return TopicResult(name, ErrorCode.INVALID_TOPIC_EXCEPTION,
                           f"{name!r} is an internal topic: {change}")
    return None


def check_new_configs(name: str, info: TopicInfo | None, configs: dict[str, str],
                      defaults: LogConfig) -> TopicResult | None:
    """What any controller refuses before replacing a topic's config overrides: an unknown
    topic, a key or value klog cannot honour (named). None: acceptable."""
    if info is None:
        return TopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           f"topic {name!r} does not exist")
    try:
        topic_log_config(defaults, configs)
    except ValueError as exc:
        return TopicResult(name, ErrorCode.INVALID_CONFIG, str(exc))
    return None


def check_partition_increase(name: str, info: TopicInfo | None, count: int) -> TopicResult | None:
    """What any controller refuses before placing new partitions (Kafka's rules and
    messages): an unknown or internal topic (its partition count is how groups find their
    coordinator), a count that does not grow, or one past the limit. None: acceptable."""
    refused = check_changeable(name, info, "its partition count cannot change")
    if refused is not None:
        return refused
    current = info.partition_count
    if count == current:
        return TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                           f"topic {name!r} already has {current} partitions")
    if count < current:
        return TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                           f"topic {name!r} currently has {current} partitions, which is higher "
                           f"than the requested {count}")
    if count > MAX_PARTITIONS_PER_TOPIC:
        return TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                           f"number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}, "
                           f"got {count}")
    return None
