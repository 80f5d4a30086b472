"""Per-partition log configuration, with Kafka's topic-config names in snake_case.

What it owns: the storage knobs of one partition log and their validation. Values are checked
once, here, so the engine never meets a nonsensical one; every error names the key in Kafka's
dotted form (``segment.bytes must be >= 14``) because that is what an operator typed.

``LogConfig.from_kafka`` reads the string map a CreateTopics request or a ``server.properties``
file carries; ``to_kafka`` gives the same map back for DescribeConfigs.

Deviations from Kafka, on purpose:

- ``segment.bytes`` is capped at 2 GiB - 1 because index positions are int32 (Kafka's is an
  int config, so the cap is the same).
- ``segment.index.bytes`` must hold at least one time index entry (12 bytes); Kafka accepts 4,
  which makes the time index permanently full.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
LONG_MAX = 2**63 - 1  # Kafka's "never" for flush.messages and flush.ms
INT32_MAX = 2**31 - 1
DAY_MS = 24 * 60 * 60 * 1000

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """Storage settings of one partition log. Frozen: change a setting by building a new one
    (``dataclasses.replace``). Raises ValueError from the constructor when a value is invalid."""

    segment_bytes: int = GIB
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * MIB
    retention_ms: int = 7 * DAY_MS  # -1 keeps data forever
    retention_bytes: int = -1  # -1: no size bound
    flush_messages: int = LONG_MAX  # fdatasync after this many records (1 = every append)
    flush_ms: int = LONG_MAX  # fdatasync when the oldest unflushed append is this old
    message_timestamp_type: str = "CreateTime"
    max_message_bytes: int = 1048588  # largest record batch accepted
    file_delete_delay_ms: int = 60_000  # how long a deleted segment stays readable as .deleted
    # Replication's, kept with the topic's other settings: acks=all appends are refused while
    # fewer replicas than this are in sync (1: the leader alone suffices).
    min_insync_replicas: int = 1
    # whether the controller may make an out-of-sync replica the leader when no in-sync one
    # is live (losing what only the ISR had); read by the fleet's controller, not the engine
    unclean_leader_election_enable: bool = False
    # Compaction (Kafka's LogCleaner): "delete" (retention only), "compact" (the cleaner keeps
    # each key's latest record), or both, comma-separated as Kafka writes them
    cleanup_policy: str = "delete"
    min_cleanable_dirty_ratio: float = 0.5  # clean when dirty bytes / all bytes reach this
    min_compaction_lag_ms: int = 0  # a record stays uncompacted at least this long
    max_compaction_lag_ms: int = LONG_MAX  # a dirty record is cleaned within this, any ratio
    delete_retention_ms: int = DAY_MS  # tombstones (and empty markers) survive this long

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            is_int = isinstance(value, int) and not isinstance(value, bool)
            if field.type in ("int", int) and not is_int:
                raise ValueError(f"{kafka_key(field.name)} must be an integer, got {value!r}")
            if field.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"{kafka_key(field.name)} must be true or false, "
                                 f"got {value!r}")
        _at_least(self, "segment_bytes", 14)
        _at_most(self, "segment_bytes", INT32_MAX)
        _at_least(self, "segment_ms", 1)
        _at_least(self, "index_interval_bytes", 0)
        _at_least(self, "segment_index_bytes", 12)
        _at_most(self, "segment_index_bytes", INT32_MAX)
        _at_least(self, "retention_ms", -1)
        _at_least(self, "retention_bytes", -1)
        _at_least(self, "flush_messages", 1)
        _at_least(self, "flush_ms", 0)
        _at_least(self, "max_message_bytes", 0)
        _at_least(self, "file_delete_delay_ms", 0)
        _at_least(self, "min_insync_replicas", 1)
        _at_least(self, "min_compaction_lag_ms", 0)
        _at_least(self, "max_compaction_lag_ms", 1)
        _at_least(self, "delete_retention_ms", 0)
        if not isinstance(self.min_cleanable_dirty_ratio, (int, float)) or isinstance(
                self.min_cleanable_dirty_ratio, bool) or not (
                0 <= self.min_cleanable_dirty_ratio <= 1):
            raise ValueError(f"min.cleanable.dirty.ratio must be between 0 and 1, got "
                             f"{self.min_cleanable_dirty_ratio!r}")
        policies = self.cleanup_policy.split(",") if isinstance(self.cleanup_policy, str) else []
        if not policies or any(p not in CLEANUP_POLICIES for p in policies):
            raise ValueError(f"cleanup.policy must be a list of {', '.join(CLEANUP_POLICIES)}, "
                             f"got {self.cleanup_policy!r}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(
                f"message.timestamp.type must be one of {', '.join(TIMESTAMP_TYPES)}, "
                f"got {self.message_timestamp_type!r}"
            )

    @property
    def compact(self) -> bool:
        """True when the log cleaner compacts this log (cleanup.policy has "compact")."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """True when retention deletes old segments (cleanup.policy has "delete")."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        """True when the broker stamps its own clock on every batch (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_kafka(cls, settings: dict[str, str], **overrides: Any) -> LogConfig:
        """Build from Kafka's dotted keys (``{"segment.bytes": "1048576"}``).

        Raises ValueError naming the key that is unknown or whose value does not parse.
        ``overrides`` (snake_case) win over ``settings``.
        """
        values: dict[str, Any] = {}
        for key, text in settings.items():
            name = _FIELD_BY_KEY.get(key)
            if name is None:
                known = ", ".join(sorted(_FIELD_BY_KEY))
                raise ValueError(f"unknown log config {key!r}; known: {known}")
            values[name] = _parse(key, name, text)
        values.update(overrides)
        return cls(**values)

    def to_kafka(self) -> dict[str, str]:
        """The settings as Kafka's dotted keys and string values."""
        return {kafka_key(f.name): _text(getattr(self, f.name)) for f in dataclasses.fields(self)}


def kafka_key(field_name: str) -> str:
    """``segment_bytes`` -> ``segment.bytes``."""
    return field_name.replace("_", ".")


_FIELD_BY_KEY = {kafka_key(f.name): f.name for f in dataclasses.fields(LogConfig)}
KAFKA_KEYS = frozenset(_FIELD_BY_KEY)  # what from_kafka accepts (filter other topic configs)
_BOOL_FIELDS = frozenset(f.name for f in dataclasses.fields(LogConfig) if f.type in ("bool", bool))


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _parse(key: str, name: str, text: str) -> Any:
    if name == "message_timestamp_type":
        return text.strip()
    if name == "cleanup_policy":  # Kafka's list: "compact, delete" is "compact,delete"
        return ",".join(p.strip().lower() for p in str(text).split(","))
    if name == "min_cleanable_dirty_ratio":
        try:
            return float(str(text).strip())
        except ValueError:
            raise ValueError(f"{key} must be a number, got {text!r}") from None
    if name in _BOOL_FIELDS:
        lowered = str(text).strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"{key} must be true or false, got {text!r}")
        return lowered == "true"
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {text!r}") from None


def _at_least(config: LogConfig, name: str, low: int) -> None:
    if getattr(config, name) < low:
        raise ValueError(f"{kafka_key(name)} must be >= {low}, got {getattr(config, name)}")


def _at_most(config: LogConfig, name: str, high: int) -> None:
    if getattr(config, name) > high:
        raise ValueError(f"{kafka_key(name)} must be <= {high}, got {getattr(config, name)}")
