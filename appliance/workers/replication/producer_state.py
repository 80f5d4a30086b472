"""Idempotent producers: per (producer id, partition) sequence checks, as Kafka does them.

For each producer of a partition we keep its epoch and the sequence ranges and offsets of its
last five batches (a producer has at most five in flight). A batch that repeats one of those
ranges is a retry whose first attempt was appended: it is acknowledged with the original
offsets and not appended again. A gap or a step backwards is OUT_OF_ORDER_SEQUENCE_NUMBER, an
older epoch INVALID_PRODUCER_EPOCH. The state is rebuilt from the log's batch headers when a
partition is opened, so a restart does not turn retries into duplicates.

Transactions (KIP-98): a producer's first transactional batch opens its transaction on the
partition (its first offset); a marker (a control batch, `markers.py`) ends it. The earliest
open transaction bounds the last stable offset. A non-transactional batch from a producer with
a transaction open is INVALID_TXN_STATE; a marker with an older producer epoch is FENCED, one
from an older coordinator epoch COORDINATOR_FENCED. Replaying the log also lists the aborted
transactions per segment, from which the .txnindex files are checked (`of_log`).

KIP-890's first part (verification): before a transactional batch may start a transaction of
its producer here, the leader asks the transaction coordinator whether the partition is in the
producer's ongoing transaction. `start_verification` hands out a guard for that question (one
per producer, kept with the lowest sequence it was asked for); the producer's next append or
marker here drops it, so an answer that arrives after a marker ended the transaction no longer
opens one (the append is UNVERIFIED). A batch of a higher sequence than the one being verified
is OUT_OF_ORDER meanwhile (Kafka's VerificationStateEntry).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum

from appliance.segments.txn_index import AbortedTxn
from appliance.workers.replication.markers import read_marker
from klog.protocol.record_batch import BatchHeader

MAX_CACHED_BATCHES = 5
INT32_MAX = 2**31 - 1


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    FENCED = "fenced"
    INVALID_TXN_STATE = "invalid_txn_state"
    COORDINATOR_FENCED = "coordinator_fenced"
    UNVERIFIED = "unverified"  # would start a transaction the coordinator did not confirm


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
    coordinator_epoch: int = -1  # of the last marker written for it
    last_timestamp: int = -1  # max timestamp of its last batch (DescribeProducers)

    @property
    def last_sequence(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None


class VerificationGuard:
    """The identity of one verification of one producer's transaction on a partition."""

    __slots__ = ("epoch", "lowest_sequence")

    def __init__(self, epoch: int, sequence: int):
        self.epoch = epoch
        self.lowest_sequence = sequence

    def asked(self, epoch: int, sequence: int) -> None:
        """Another batch asks: remember the lowest sequence of the newest epoch."""
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence
        elif epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence


@dataclass(frozen=True)
class CompletedTxn:
    """A transaction a marker ended: its first offset, the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


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
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._verifying: dict[int, VerificationGuard] = {}  # KIP-890: producer id -> guard
        # what `of_log` replayed: segment base -> the aborted transactions whose markers it holds
        self.aborted_by_segment: dict[int, list[AbortedTxn]] = {}

    @classmethod
    def of_log(cls, plog) -> ProducerStates:
        """The producers as a log's batch headers say (a log opened, or truncated), with
        their open transactions and, in `aborted_by_segment`, the aborted ones (control
        batches are the only ones whose bytes are read)."""
        states = cls()
        for where, header in plog.iter_batch_headers():
            if header.is_control:
                marker = read_marker(plog.read_batch(where, header.size))
                if marker is not None:
                    done = states.record_marker(header.producer_id, header.producer_epoch,
                                                marker.commit, marker.coordinator_epoch,
                                                header.base_offset)
                    if done is not None and done.aborted:
                        states.aborted_by_segment.setdefault(
                            where.segment_base_offset, []).append(states.aborted_entry(done))
                continue
            states.record(header, header.base_offset)
        return states

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction (None: none is open)."""
        return min(self._open.values()) if self._open else None

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction."""
        return dict(self._open)

    def aborted_entry(self, done: CompletedTxn) -> AbortedTxn:
        """The .txnindex entry of an aborted transaction just ended: the LSO it leaves is
        the earliest other open transaction's first offset, else the offset past its marker
        (Kafka's lastStableOffset(completedTxn))."""
        first = self.first_unstable_offset
        return AbortedTxn(done.producer_id, done.first_offset, done.last_offset,
                          done.last_offset + 1 if first is None else first)

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> Verdict:
        """Whether a marker may be written (changes nothing)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return Verdict.APPEND
        if producer_epoch < entry.epoch:
            return Verdict.FENCED
        if coordinator_epoch < entry.coordinator_epoch:
            return Verdict.COORDINATOR_FENCED
        return Verdict.APPEND

    def record_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, offset: int) -> CompletedTxn | None:
        """A marker appended at `offset`: the producer's open transaction (if any) ends."""
        entry = self._producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch:
            entry = self._producers[producer_id] = ProducerEntry(producer_epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        self._verifying.pop(producer_id, None)
        first = self._open.pop(producer_id, None)
        if first is None:
            return None
        return CompletedTxn(producer_id, first, offset, not commit)

    def __len__(self) -> int:
        return len(self._producers)

    def last_batch_offsets(self) -> dict[int, int]:
        """producer id -> last offset of its last data batch: the log cleaner keeps that
        batch (empty if need be), so the producer's epoch and sequence survive compaction
        (Kafka's lastRecordsOfActiveProducers)."""
        return {pid: entry.batches[-1].last_offset
                for pid, entry in self._producers.items() if entry.batches}

    def next_sequence(self, producer_id: int, producer_epoch: int) -> int:
        """The base sequence `check` accepts next from this producer at this epoch: the group
        coordinator writes a producer's transactional offsets (TxnOffsetCommit) in batches of
        the producer, as Kafka's coordinator-origin appends, which check no client sequence."""
        entry = self._producers.get(producer_id)
        if entry is None or producer_epoch > entry.epoch or entry.last_sequence is None:
            return 0
        return _next_sequence(entry.last_sequence)

    def needs_verification(self, header: BatchHeader) -> bool:
        """Whether a transactional batch would start its producer's transaction here (none
        open at its epoch), so the coordinator must confirm it first. A batch of an older
        epoch than the producer's here (a marker of a fenced epoch landed since) needs none:
        it is INVALID_PRODUCER_EPOCH, which a client recovers from (Kafka's KAFKA-19690)."""
        if not header.is_transactional or header.producer_id < 0:
            return False
        entry = self._producers.get(header.producer_id)
        if entry is not None and header.producer_epoch < entry.epoch:
            return False
        return not self._ongoing(header.producer_id, header.producer_epoch)

    def _ongoing(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._producers.get(producer_id)
        return producer_id in self._open and entry is not None and entry.epoch == producer_epoch

    def start_verification(self, header: BatchHeader) -> VerificationGuard:
        """The guard an append must present after the coordinator confirmed the batch's
        transaction (the producer's current one, if a verification is already under way)."""
        guard = self._verifying.get(header.producer_id)
        if guard is None:
            guard = self._verifying[header.producer_id] = VerificationGuard(
                header.producer_epoch, header.base_sequence)
        else:
            guard.asked(header.producer_epoch, header.base_sequence)
        return guard

    def end_verification(self, producer_id: int, guard: VerificationGuard) -> None:
        """A verification that failed for good: its guard is of no further use."""
        if self._verifying.get(producer_id) is guard:
            del self._verifying[producer_id]

    def check(self, header: BatchHeader, guard: VerificationGuard | bool | None = False
              ) -> tuple[Verdict, CachedBatch | None]:
        """Decide what to do with an incoming batch; changes nothing. ``guard`` False: no
        verification required (not a client's produce, or verification is off); else a
        transactional batch that would start a transaction must present the producer's
        current guard (None presents none)."""
        if header.producer_id < 0:
            return Verdict.APPEND, None
        if not header.is_transactional and header.producer_id in self._open:
            return Verdict.INVALID_TXN_STATE, None
        entry = self._producers.get(header.producer_id)
        if entry is not None and header.producer_epoch < entry.epoch:
            return Verdict.FENCED, None
        if guard is not False and header.is_transactional:
            verdict = self._check_guard(header, guard)
            if verdict is not None:
                return verdict, None
        if entry is None:
            return Verdict.APPEND, None
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

    def _check_guard(self, header: BatchHeader, guard) -> Verdict | None:
        current = self._verifying.get(header.producer_id)
        if current is not None and header.base_sequence > current.lowest_sequence \
                and header.producer_epoch == current.epoch:
            return Verdict.OUT_OF_ORDER
        if self._ongoing(header.producer_id, header.producer_epoch):
            return None
        if guard is None or current is not guard:
            return Verdict.UNVERIFIED
        return None

    def record(self, header: BatchHeader, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Remember a batch that was appended at `base_offset`."""
        if header.producer_id < 0:
            return
        if self._verifying:
            self._verifying.pop(header.producer_id, None)
        if header.is_transactional and header.producer_id not in self._open:
            self._open[header.producer_id] = base_offset
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            coordinator_epoch = -1 if entry is None else entry.coordinator_epoch
            entry = self._producers[header.producer_id] = ProducerEntry(
                header.producer_epoch, coordinator_epoch=coordinator_epoch)
        entry.last_timestamp = header.max_timestamp
        entry.batches.append(
            CachedBatch(
                header.base_sequence,
                last_sequence_of(header),
                base_offset,
                base_offset + header.last_offset_delta,
                log_append_time_ms,
            )
        )

    def described(self) -> list[tuple[int, ProducerEntry, int]]:
        """(producer id, entry, first offset of its open transaction or -1) of each producer
        known here (Kafka's DescribeProducers answers the same)."""
        return [(pid, entry, self._open.get(pid, -1)) for pid, entry in self._producers.items()]

    def forget_all(self) -> None:
        self._producers.clear()
        self._open.clear()
        self._verifying.clear()
