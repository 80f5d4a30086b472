"""Idempotent-producer bookkeeping: the producer id, and sequences and ordering per partition.

Kafka's rule (KIP-98): every batch of a partition carries ``(producer_id, epoch,
base_sequence)``; sequences follow one another without gaps, at most five batches of a
partition are in flight, and a broker acknowledges a repeat of one of the last five without
appending it again. So a retry of a batch whose first attempt did land (a lost response, a
broker killed after the append) is not a duplicate.

What this object decides:
- a batch is stamped with the next sequence when it is first sent, never again;
- a retried batch (``attempts > 0``) goes out alone, when nothing else of its partition is in
  flight, so retries cannot overtake each other and the broker sees sequences in order;
- OUT_OF_ORDER_SEQUENCE_NUMBER is retriable while an earlier batch of the partition is still
  unacknowledged (it failed first, or is in flight); otherwise it is fatal for the batch,
  and the producer asks for a new producer id so that the partition's sequences restart at 0;
- without idempotence only the in-flight limit and the retry rule apply.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque

from klog.producer.batch import ProducerBatch

INT32_MAX = 2**31 - 1


class Sequences:
    def __init__(self, *, enabled: bool, max_in_flight: int):
        self.enabled = enabled
        self.max_in_flight = max_in_flight
        self.producer_id = -1
        self.producer_epoch = -1
        self.requesting = False  # an InitProducerId is in flight
        self.transactional = False  # stamp batches as part of a transaction
        self.retry_at_ms = 0
        self._next: dict[tuple[str, int], int] = {}
        self._unacked: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.in_flight: dict[tuple[str, int], list[ProducerBatch]] = {}

    @property
    def has_producer_id(self) -> bool:
        return not self.enabled or self.producer_id >= 0

    def needs_producer_id(self, now_ms: int) -> bool:
        return (self.enabled and self.producer_id < 0 and not self.requesting
                and now_ms >= self.retry_at_ms)

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        """A fresh identity: every partition's sequences restart at 0."""
        self.requesting = False
        self.producer_id, self.producer_epoch = producer_id, epoch
        self._next.clear()
        self._unacked.clear()

    def producer_id_failed(self, retry_at_ms: int) -> None:
        self.requesting = False
        self.retry_at_ms = retry_at_ms

    def can_send(self, batch: ProducerBatch) -> bool:
        flying = self.in_flight.get(batch.key)
        if not flying:
            return True
        if batch.attempts:  # a retry goes alone
            return False
        if len(flying) >= self.max_in_flight:
            return False
        return flying[-1].producer_id == self.producer_id  # no overtaking across identities

    def sent(self, batch: ProducerBatch) -> None:
        """The batch is going out: stamp it (first time only) and count it in flight."""
        key = batch.key
        if self.enabled and batch.base_sequence < 0:
            sequence = self._next.get(key, 0)
            batch.stamp(self.producer_id, self.producer_epoch, sequence, self.transactional)
            following = sequence + batch.count
            self._next[key] = following - INT32_MAX - 1 if following > INT32_MAX else following
            unacked = self._unacked.get(key)
            if unacked is None:
                unacked = self._unacked[key] = deque()
            unacked.append(batch)
        batch.attempts += 1
        flying = self.in_flight.get(key)
        if flying is None:
            self.in_flight[key] = [batch]
        else:
            flying.append(batch)

    def answered(self, batch: ProducerBatch) -> None:
        """The attempt came back (either way): no longer in flight."""
        flying = self.in_flight.get(batch.key)
        if flying and batch in flying:
            flying.remove(batch)

    def finished(self, batch: ProducerBatch) -> None:
        """The batch is done for good (acknowledged, or failed without retry)."""
        unacked = self._unacked.get(batch.key)
        if unacked and batch in unacked:
            unacked.remove(batch)

    def earlier_unacked(self, batch: ProducerBatch) -> bool:
        """Is a batch of the same partition and identity, sent before this one, still open?"""
        unacked = self._unacked.get(batch.key)
        return bool(unacked) and unacked[0] is not batch and batch in unacked

    def broken(self, batch: ProducerBatch) -> None:
        """A stamped batch failed for good: its partition's sequence has a gap. Ask for a new
        producer id (idempotent mode), after which sequences restart."""
        if self.enabled and batch.producer_id == self.producer_id and batch.base_sequence >= 0:
            self.producer_id = -1
