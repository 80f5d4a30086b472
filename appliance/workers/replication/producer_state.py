"""Idempotent producers: per (producer id, partition) sequence checks, as Kafka does them.

For each producer of a partition we keep its epoch and the sequence ranges and offsets of its
last five batches (a producer has at most five in flight). A batch that repeats one of those
ranges is a retry whose first attempt was appended: it is acknowledged with the original
offsets and not appended again. A gap or a step backwards is OUT_OF_ORDER_SEQUENCE_NUMBER, an
older epoch INVALID_PRODUCER_EPOCH. The state is rebuilt from the log's batch headers when a
partition is opened, so a restart does not turn retries into duplicates.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from klog.protocol.record_batch import BatchHeader

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    FENCED = "fenced"


@dataclass(frozen=True)
class CachedBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int
    log_append_time_ms: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_sequence(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None


def last_sequence_of(header: BatchHeader) -> int:
    """Sequences wrap at int32 max back to 0, as Kafka's DefaultRecordBatch does."""
    last = header.base_sequence + header.last_offset_delta
    return last - INT32_MAX - 1 if last > INT32_MAX else last


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1


class ProducerStates:
    """The producers of one partition. Owned by the partition's single writer."""

    def __init__(self):
        self._producers: dict[int, ProducerEntry] = {}

    @classmethod
    def of_log(cls, plog) -> ProducerStates:
        """The producers as a log's batch headers say (a log opened, or truncated)."""
        states = cls()
        for _, header in plog.iter_batch_headers():
            states.record(header, header.base_offset)
        return states

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader) -> tuple[Verdict, CachedBatch | None]:
        """Decide what to do with an incoming batch; changes nothing."""
        if header.producer_id < 0:
            return Verdict.APPEND, None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return Verdict.APPEND, None
        if header.producer_epoch < entry.epoch:
            return Verdict.FENCED, None
        if header.producer_epoch > entry.epoch:
            verdict = Verdict.APPEND if header.base_sequence == 0 else Verdict.OUT_OF_ORDER
            return verdict, None
        last = last_sequence_of(header)
        for cached in entry.batches:
            if cached.first_sequence == header.base_sequence and cached.last_sequence == last:
                return Verdict.DUPLICATE, cached
        if entry.last_sequence is None or header.base_sequence == _next_sequence(
            entry.last_sequence
        ):
            return Verdict.APPEND, None
        return Verdict.OUT_OF_ORDER, None

    def record(self, header: BatchHeader, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Remember a batch that was appended at `base_offset`."""
        if header.producer_id < 0:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.batches.append(
            CachedBatch(
                header.base_sequence,
                last_sequence_of(header),
                base_offset,
                base_offset + header.last_offset_delta,
                log_append_time_ms,
            )
        )

    def forget_all(self) -> None:
        self._producers.clear()
