"""An appliance alone deciding for itself: topics (creation, deletion, placement) and
producer ids. It runs in the supervisor, the only process that changes the catalog; workers
reach it through `appliance.control.server` and hold only its client.
"""

from __future__ import annotations

import dataclasses

from appliance.control.catalog import Catalog, ProducerIdBlocks
from appliance.control.channel import AlterPartition
from appliance.control.interface import FleetListener, TopicListener
from appliance.control.placement import place_partitions
from appliance.control.topics import (
    INTERNAL_PREFIX,
    TopicInfo,
    TopicResult,
    check_changeable,
    check_new_configs,
    check_new_topic,
    check_partition_increase,
)
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode


class LocalDecider:
    """The topic decisions of an appliance alone, over its catalog. Not thread-safe: the
    supervisor's loop owns it."""

    def __init__(self, catalog: Catalog, *, defaults: LogConfig, default_partitions: int,
                 worker_count: int = 1):
        self.catalog = catalog
        self.defaults = defaults
        self.default_partitions = default_partitions
        self.workers = range(worker_count)
        self._listeners: list[TopicListener] = []
        self._producer_ids = ProducerIdBlocks(catalog.root.parent)

    def allocate_producer_id(self) -> int:
        return self._producer_ids.allocate()

    def alter_partitions(self, asks: list[tuple[AlterPartition, int]]) -> list[ErrorCode]:
        """Alone there is no replication, so no ISR to change."""
        return [ErrorCode.INVALID_REQUEST] * len(asks)

    def cluster_admin(self, op: str, args: str) -> tuple[ErrorCode, str | None]:
        """Alone the workers answer cluster admin requests themselves (a single node)."""
        return ErrorCode.INVALID_REQUEST, None

    def add_listener(self, listener: TopicListener) -> None:
        """`listener(name, info)` runs after a topic is created (info) or deleted (None)."""
        self._listeners.append(listener)

    def add_fleet_listener(self, listener: FleetListener) -> None:
        """Alone there is no fleet: the listener never runs."""

    def topics(self) -> list[TopicInfo]:
        return self.catalog.topics()

    def topic(self, name: str) -> TopicInfo | None:
        return self.catalog.get(name)

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, *,
                     validate_only: bool = False) -> TopicResult:
        configs = dict(configs or {})
        if partitions == -1:
            partitions = self.default_partitions
        refused = check_new_topic(name, partitions, configs, self.defaults)
        if refused is not None:
            return refused
        if name in self.catalog:
            return TopicResult(name, ErrorCode.TOPIC_ALREADY_EXISTS,
                               f"topic {name!r} already exists")
        if replication_factor not in (-1, 1):
            return TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"replication factor must be 1 on one appliance, "
                               f"got {replication_factor}")
        if validate_only:
            return TopicResult(name)
        owners = place_partitions(partitions, self.catalog.load_by_worker(self.workers))
        info = TopicInfo(name=name, owners=owners, configs=configs,
                         internal=name.startswith(INTERNAL_PREFIX))
        self.catalog.put(info)
        for listener in self._listeners:
            listener(name, info)
        return TopicResult(name)

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> TopicResult:
        info = self.catalog.get(name)
        refused = check_partition_increase(name, info, count)
        if refused is not None or validate_only:
            return refused or TopicResult(name)
        added = place_partitions(count - info.partition_count,
                                 self.catalog.load_by_worker(self.workers))
        grown = dataclasses.replace(info, owners=info.owners + added)
        self.catalog.put(grown)
        for listener in self._listeners:
            listener(name, grown)
        return TopicResult(name)

    def alter_topic_configs(self, name: str, configs: dict[str, str], *,
                            validate_only: bool = False) -> TopicResult:
        """Replace the topic's config overrides (AlterConfigs); the workers reconfigure its
        logs when they hear of the change."""
        info = self.catalog.get(name)
        refused = check_new_configs(name, info, configs, self.defaults)
        if refused is not None or validate_only:
            return refused or TopicResult(name)
        if info.configs != configs:
            changed = dataclasses.replace(info, configs=dict(configs))
            self.catalog.put(changed)
            for listener in self._listeners:
                listener(name, changed)
        return TopicResult(name)

    def delete_topic(self, name: str) -> TopicResult:
        refused = check_changeable(name, self.catalog.get(name), "it cannot be deleted")
        if refused is not None:
            return refused
        self.catalog.remove(name)
        for listener in self._listeners:
            listener(name, None)
        return TopicResult(name)
