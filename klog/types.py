"""The client's public value types: small immutable tuples, named as in kafka-python.

`ConsumerRecord` is the one unusual design here. A consumer hands out one record object per
message, so the object must cost no more than the decoder's own tuple: a `ConsumerRecord` *is*
that tuple (offset, timestamp, key, value, headers), and `topic`, `partition` and
`timestamp_type` are attributes of a per-partition subclass made once and cached
(`ConsumerRecord.class_for`). `record.topic` works as on any object; `isinstance(record,
ConsumerRecord)` holds; equality compares the five tuple fields only.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from klog.protocol.records import Record

__all__ = ["ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "RecordMetadata",
           "TopicPartition"]

CREATE_TIME, LOG_APPEND_TIME = 0, 1


class TopicPartition(NamedTuple):
    """A partition of a topic: ``TopicPartition("clicks", 0)``."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 with ``acks=0`` (the broker says
    nothing); ``timestamp`` is the record's CreateTime, or the broker's LogAppendTime when the
    topic uses that."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_start_offset: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """An answer of `Consumer.offsets_for_times`: the first offset at or after the timestamp."""

    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """What a transactional producer needs of a consumer to commit its offsets inside a
    transaction (Kafka's ConsumerGroupMetadata, KIP-447): the coordinator refuses the commit
    of a member of an older generation, so a zombie cannot commit. ``consumer.group_metadata()``
    gives it."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndMetadata(NamedTuple):
    """A position to commit for a consumer group: the offset of the next record to read (not
    of the last one processed, Kafka's convention), an application string stored with it, and
    the leader epoch of the record before it (-1: unknown, which is all klog hands out)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerRecord(Record):
    """One consumed record: ``.topic .partition .offset .timestamp .timestamp_type .key .value
    .headers`` (headers: a list of ``(str, bytes | None)``). See the module docstring."""

    __slots__ = ()
    topic: str
    partition: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime

    @staticmethod
    @lru_cache(maxsize=4096)
    def class_for(topic: str, partition: int, timestamp_type: int = CREATE_TIME) -> type:
        """The subclass whose instances belong to ``topic``/``partition`` (cached)."""
        return type("ConsumerRecord", (ConsumerRecord,), {
            "__slots__": (), "topic": topic, "partition": partition,
            "timestamp_type": timestamp_type, "__module__": __name__,
            "__qualname__": "ConsumerRecord"})

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __reduce__(self):
        return _rebuild_record, (self.topic, self.partition, self.timestamp_type, tuple(self))


def _rebuild_record(topic: str, partition: int, timestamp_type: int, fields: tuple):
    return tuple.__new__(ConsumerRecord.class_for(topic, partition, timestamp_type), fields)


def make_consumer_record(topic: str, partition: int, offset: int, timestamp: int, key, value,
                         headers=(), timestamp_type: int = CREATE_TIME) -> ConsumerRecord:
    """A ConsumerRecord built by hand (tests, tools); the consumer builds them in bulk."""
    return _rebuild_record(topic, partition, timestamp_type,
                           (offset, timestamp, key, value, list(headers)))
