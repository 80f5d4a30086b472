"""The appliance's controller: topic creation, deletion and partition placement.

Workers never change the catalog themselves; they ask the controller and then follow what it
decided (DESIGN.md: "topic creation and partition placement go through it"). With one worker
the controller lives in the worker's process (`LocalController`); the supervisor will serve the
same calls over its control channel to several workers. Either way a worker sees the interface
below and subscribes to changes with `add_listener`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.catalog import (
    Catalog,
    InvalidTopicError,
    ProducerIdBlocks,
    TopicInfo,
    check_topic_name,
)
from appliance.placement import place_partitions
from appliance.segments.config import LogConfig
from klog.protocol.errors import ErrorCode

MAX_PARTITIONS_PER_TOPIC = 100_000


@dataclass(frozen=True)
class TopicResult:
    """The outcome of one create or delete: an error code and a message for the client."""

    name: str
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


# Kafka topic configs that clients send with their default values, which klog honours by doing
# nothing: any other value is refused, because klog would not do what it asks.
DEFAULT_ONLY_CONFIGS = {"cleanup.policy": "delete", "compression.type": "producer"}


def topic_log_config(defaults: LogConfig, overrides: dict[str, str]) -> LogConfig:
    """The effective LogConfig of a topic: the broker's defaults, then the topic's overrides.

    Raises ValueError naming a key that is unknown or whose value klog cannot honour."""
    settings = {**defaults.to_kafka()}
    for key, value in overrides.items():
        if key in DEFAULT_ONLY_CONFIGS:
            if value != DEFAULT_ONLY_CONFIGS[key]:
                raise ValueError(f"{key}={value} is not supported; klog only does "
                                 f"{key}={DEFAULT_ONLY_CONFIGS[key]}")
            continue
        settings[key] = value
    return LogConfig.from_kafka(settings)


class LocalController:
    """The controller in the worker's own process: the one-worker appliance."""

    def __init__(self, catalog: Catalog, *, defaults: LogConfig, default_partitions: int,
                 worker_count: int = 1):
        self.catalog = catalog
        self.defaults = defaults
        self.default_partitions = default_partitions
        self.workers = range(worker_count)
        self._listeners: list[Callable[[str, TopicInfo | None], None]] = []
        self._producer_ids = ProducerIdBlocks(catalog.root.parent)

    def allocate_producer_id(self) -> int:
        return self._producer_ids.allocate()

    def add_listener(self, listener: Callable[[str, TopicInfo | None], None]) -> None:
        """`listener(name, info)` runs after a topic is created (info) or deleted (None)."""
        self._listeners.append(listener)

    def topics(self) -> list[TopicInfo]:
        return self.catalog.topics()

    def topic(self, name: str) -> TopicInfo | None:
        return self.catalog.get(name)

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, *,
                     validate_only: bool = False) -> TopicResult:
        configs = dict(configs or {})
        try:
            check_topic_name(name)
        except InvalidTopicError as exc:
            return TopicResult(name, ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc))
        if name in self.catalog:
            return TopicResult(name, ErrorCode.TOPIC_ALREADY_EXISTS,
                               f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self.default_partitions
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            return TopicResult(name, ErrorCode.INVALID_PARTITIONS,
                               f"number of partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}, "
                               f"got {partitions}")
        if replication_factor not in (-1, 1):
            return TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"replication factor must be 1 on one appliance, "
                               f"got {replication_factor}")
        try:
            topic_log_config(self.defaults, configs)
        except ValueError as exc:
            return TopicResult(name, ErrorCode.INVALID_CONFIG, str(exc))
        if validate_only:
            return TopicResult(name)
        owners = place_partitions(partitions, self.catalog.load_by_worker(self.workers))
        info = TopicInfo(name=name, owners=owners, configs=configs,
                         internal=name.startswith("__"))
        self.catalog.put(info)
        for listener in self._listeners:
            listener(name, info)
        return TopicResult(name)

    def delete_topic(self, name: str) -> TopicResult:
        info = self.catalog.get(name)
        if info is None:
            return TopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"topic {name!r} does not exist")
        if info.internal:
            return TopicResult(name, ErrorCode.INVALID_TOPIC_EXCEPTION,
                               f"{name!r} is an internal topic and cannot be deleted")
        self.catalog.remove(name)
        for listener in self._listeners:
            listener(name, None)
        return TopicResult(name)
