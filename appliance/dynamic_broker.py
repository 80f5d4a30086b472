"""Brokers' dynamic configs (Kafka's DynamicBrokerConfig): the keys AlterConfigs may change on a
running broker, and the effective configuration they make.

Kafka's precedence, lowest first: the static file (`server.properties`, STATIC_BROKER_CONFIG),
the cluster-wide default entity `/config/brokers/<default>` (DYNAMIC_DEFAULT_BROKER_CONFIG),
the node's own entity `/config/brokers/<node id>` (DYNAMIC_BROKER_CONFIG). A node here is
one worker (its node id), as Kafka's broker is the one that answers for its id.

The keys: the topic defaults (`log.retention.ms`, `log.segment.bytes`, `log.cleanup.policy`,
`log.cleaner.*` ratios and lags, ...), the log cleaner's own (`log.cleaner.io.max.bytes.per
.second`, `log.cleaner.backoff.ms`, `log.cleaner.dedupe.buffer.size`, `log.cleaner.io.buffer
.size`; `log.cleaner.threads` is kept and applies at the worker's next start), and the
replication throttles (`leader.replication.throttled.rate`, `follower.replication.throttled
.rate`, read by the replica fetchers from the node configs in a fleet).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from appliance.config import KEYS, PRECEDENCE, BrokerConfig

LOG_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.retention.ms",
    "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
    "log.index.interval.bytes", "log.index.size.max.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.message.timestamp.type", "message.max.bytes",
    "log.cleanup.policy", "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "min.insync.replicas", "unclean.leader.election.enable", "file.delete.delay.ms",
})
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size",
})
THROTTLE_KEYS = frozenset({"leader.replication.throttled.rate",
                           "follower.replication.throttled.rate"})
DYNAMIC_KEYS = LOG_KEYS | CLEANER_KEYS | THROTTLE_KEYS


def check(settings: dict[str, str], base: BrokerConfig) -> str | None:
    """Why these settings cannot be a node's dynamic configs (the key named), or None."""
    for key in sorted(settings):
        if key not in DYNAMIC_KEYS:
            if key in KEYS:
                return f"Cannot update these configs dynamically: {key}"
            return f"Unknown broker config: {key}"
        if key in THROTTLE_KEYS:
            try:
                if int(settings[key].strip()) < 0:
                    raise ValueError
            except ValueError:
                return f"Invalid value {settings[key]!r} for {key}: must be a long >= 0"
    try:
        effective(base, [settings])
    except ValueError as exc:
        return str(exc)
    return None


def effective(base: BrokerConfig, layers: Iterable[dict[str, str]]) -> BrokerConfig:
    """`base` with the dynamic layers applied (later layers win). Raises ValueError naming the
    key whose value does not parse or is out of range."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update({k: v for k, v in layer.items() if k in DYNAMIC_KEYS - THROTTLE_KEYS})
    if not merged:
        return base
    log: dict[str, object] = {}
    broker: dict[str, object] = {}
    for key in sorted(merged, key=lambda k: PRECEDENCE.get(k, 0)):
        target, parse = KEYS[key]
        try:
            value = parse(merged[key])
        except ValueError as exc:
            raise ValueError(f"Invalid value {merged[key]!r} for {key}: {exc}") from None
        if target.startswith("log."):
            log[target[4:]] = value
        else:
            broker[target] = value
    try:
        defaults = dataclasses.replace(base.log_defaults, **log)
    except ValueError as exc:
        raise ValueError(f"Invalid value: {exc}") from None
    return dataclasses.replace(base, log_defaults=defaults, **broker)


def node_layers(entities: dict, node_id: int) -> list[dict[str, str]]:
    """A node's dynamic layers, lowest first: the default entity, then its own."""
    brokers = entities.get("brokers", {})
    return [brokers.get("<default>", {}), brokers.get(str(node_id), {})]
