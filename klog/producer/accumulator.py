"""The record accumulator: per-partition batches, bounded by size, linger and memory. Pure.

The user's thread appends records to the *open* batch of their partition; a batch is sealed
when the next record would take it past ``batch_size`` bytes, and then queues, in order, for
the sender. An open batch older than ``linger_ms`` is sealed by :meth:`seal_lingering` (the
sender calls it), and :meth:`seal_all` seals everything for ``flush``. ``buffered_bytes``
counts every record not yet acknowledged or failed; the I/O layer blocks ``send`` while it is
above ``buffer_memory`` (back-pressure), and :meth:`release` gives bytes back when a batch
completes.

Sizes are estimates of the uncompressed encoding (payload plus a fixed per-record overhead),
as Kafka's are. The hot path is :meth:`append`: two dict lookups, a tuple, a list append.
No clock (``now_ms`` is passed in), no threads, no sockets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from klog.producer.batch import ProducerBatch

RECORD_OVERHEAD = 16  # length, attributes, deltas, key/value lengths, header count (estimate)
BATCH_OVERHEAD = 61  # the v2 batch header


def headers_size(headers) -> int:
    return sum(len(h_key) + 8 + (len(h_value) if h_value is not None else 0)
               for h_key, h_value in headers)


def values_size(values) -> int:
    """Payload bytes of a list of values (None counts 0)."""
    try:
        return sum(map(len, values))
    except TypeError:
        return sum(len(v) for v in values if v is not None)


def record_size(key, value, headers) -> int:
    size = RECORD_OVERHEAD
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        size += headers_size(headers)
    return size


class Accumulator:
    # slots: the compiled send (_sendc.c) reads buffered_bytes in place, as it does a batch's
    __slots__ = ("batch_size", "next_sticky", "linger_ms", "delivery_timeout_ms", "new_future",
                 "buffered_bytes", "incomplete", "_open", "_sticky", "queues", "sealed_count",
                 "drain_start")

    def __init__(self, *, batch_size: int, linger_ms: int, delivery_timeout_ms: int,
                 new_future: Callable[[], Any], next_sticky: Callable[[str, int], int]):
        self.batch_size = batch_size
        self.next_sticky = next_sticky
        self.linger_ms = linger_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.new_future = new_future
        self.buffered_bytes = 0
        self.incomplete: set[ProducerBatch] = set()
        self._open: dict[str, dict[int, ProducerBatch]] = {}
        self._sticky: dict[str, ProducerBatch] = {}  # topic -> the batch keyless records join
        self.queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.sealed_count = 0  # batches waiting in queues
        self.drain_start = 0  # where drain's next walk over the queues begins (fairness)

    # the user's side ----------------------------------------------------------------------

    def open_batch(self, topic: str, partition: int) -> ProducerBatch | None:
        batches = self._open.get(topic)
        return None if batches is None else batches.get(partition)

    def append(self, topic: str, partition: int, timestamp_ms: int, key, value, headers,
               size: int, now_ms: int) -> tuple[ProducerBatch, int]:
        """Add one record; returns its batch and its index in the batch."""
        batches = self._open.get(topic)
        if batches is None:
            batches = self._open[topic] = {}
        batch = batches.get(partition)
        if batch is None or (batch.size + size > self.batch_size and batch.size):
            batch = self._new_batch(batches, topic, partition, batch, now_ms)
        if batch.segments:
            batch.materialize()
        records = batch.records
        records.append((timestamp_ms, key, value, headers))
        batch.size += size
        self.buffered_bytes += size
        return batch, len(records) - 1

    def append_sticky(self, topic: str, count: int, timestamp_ms: int, value, headers,
                      size: int, now_ms: int) -> tuple[ProducerBatch, int]:
        """Add a keyless record to the topic's sticky batch; when that one is full or gone,
        move to the next partition (KIP-480: one partition per batch, not per record)."""
        batch = self._sticky.get(topic)
        if batch is None or batch.sealed or batch.size + size > self.batch_size:
            partition = self.next_sticky(topic, count)
            batches = self._open.get(topic)
            if batches is None:
                batches = self._open[topic] = {}
            batch = batches.get(partition)
            if batch is None or (batch.size + size > self.batch_size and batch.size):
                batch = self._new_batch(batches, topic, partition, batch, now_ms)
            self._sticky[topic] = batch
        if batch.segments:
            batch.materialize()
        records = batch.records
        records.append((timestamp_ms, None, value, headers))
        batch.size += size
        self.buffered_bytes += size
        return batch, len(records) - 1

    def sticky_partition(self, topic: str, count: int, size: int) -> int:
        """Where keyless records of ``size`` bytes go: the sticky batch's partition while it
        has room, else the next one."""
        batch = self._sticky.get(topic)
        if batch is not None and not batch.sealed and batch.size + size <= self.batch_size:
            return batch.partition
        return self.next_sticky(topic, count)

    def append_many(self, topic: str, partition: int, timestamp_ms: int, key, values,
                    headers, now_ms: int, payload: int | None = None
                    ) -> list[tuple[ProducerBatch, int, int]]:
        """Add records with the same key, headers and timestamp: ``(batch, first index,
        count)`` per batch they landed in (more than one when they cross batch_size).
        ``payload``: the values' total length when the caller has it already.
        The records are made by ``zip`` and sized by ``map(len)``: no Python code per value
        unless the values cross a batch boundary or hold a None."""
        batches = self._open.get(topic)
        if batches is None:
            batches = self._open[topic] = {}
        overhead = record_size(key, None, headers)
        limit = self.batch_size
        spans = []
        batch = batches.get(partition)
        if batch is None:
            batch = self._new_batch(batches, topic, partition, None, now_ms)
        start, n = 0, len(values)
        while start < n:
            rest = values if start == 0 else values[start:]
            size = (payload if start == 0 and payload is not None else values_size(rest)
                    ) + overhead * len(rest)
            if batch.size + size <= limit or not batch.size and len(rest) == 1:
                take = len(rest)
            else:
                take = self._fitting(rest, overhead, limit - batch.size, not batch.size)
            if take:
                chunk = rest if take == len(rest) else rest[:take]
                first = batch.add_segment(timestamp_ms, key, chunk, headers)
                added = size if take == len(rest) else sum(
                    overhead + (len(v) if v is not None else 0) for v in chunk)
                batch.size += added
                self.buffered_bytes += added
                spans.append((batch, first, take))
                start += take
            if start < n:
                batch = self._new_batch(batches, topic, partition, batch, now_ms)
        if key is None:
            self._sticky[topic] = batch
        return spans

    @staticmethod
    def _fitting(values, overhead: int, room: int, empty: bool) -> int:
        """How many of ``values`` fit in ``room`` bytes (at least one in an empty batch)."""
        used = 0
        for count, value in enumerate(values):
            used += overhead + (len(value) if value is not None else 0)
            if used > room:
                return max(count, 1) if empty else count
        return len(values)

    def _new_batch(self, batches: dict[int, ProducerBatch], topic: str, partition: int,
                   full: ProducerBatch | None, now_ms: int) -> ProducerBatch:
        if full is not None:
            self._seal(full)
        batch = batches[partition] = ProducerBatch(
            topic, partition, now_ms, now_ms + self.delivery_timeout_ms, self.new_future())
        self.incomplete.add(batch)
        return batch

    def _seal(self, batch: ProducerBatch) -> None:
        batch.sealed = True
        queue = self.queues.get(batch.key)
        if queue is None:
            queue = self.queues[batch.key] = deque()
        queue.append(batch)
        self.sealed_count += 1

    # the sender's side --------------------------------------------------------------------

    def seal_lingering(self, now_ms: int) -> int | None:
        """Seal open batches older than linger_ms; return when the next one will be due."""
        due = None
        for batches in self._open.values():
            for partition, batch in list(batches.items()):
                ready_at = batch.created_ms + self.linger_ms
                if ready_at <= now_ms:
                    del batches[partition]
                    self._seal(batch)
                elif due is None or ready_at < due:
                    due = ready_at
        return due

    def seal_all(self) -> None:
        """Seal every open batch now (flush)."""
        for batches in self._open.values():
            for batch in batches.values():
                self._seal(batch)
            batches.clear()

    def expired(self, now_ms: int) -> list[ProducerBatch]:
        """Take the queued batches whose delivery deadline has passed."""
        gone = []
        for queue in self.queues.values():
            while queue and queue[0].deadline_ms <= now_ms:
                gone.append(queue.popleft())
                self.sealed_count -= 1
        return gone

    def pop(self, key: tuple[str, int]) -> ProducerBatch:
        self.sealed_count -= 1
        return self.queues[key].popleft()

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a batch back for a retry, in sequence order ahead of newer batches."""
        queue = self.queues.get(batch.key)
        if queue is None:
            queue = self.queues[batch.key] = deque()
        index = 0
        while (index < len(queue) and queue[index].base_sequence >= 0
               and queue[index].base_sequence < batch.base_sequence):
            index += 1
        queue.insert(index, batch)
        self.sealed_count += 1

    def release(self, batch: ProducerBatch) -> None:
        """The batch completed (acknowledged or failed): give its bytes back."""
        if not batch.done:
            batch.done = True
            self.buffered_bytes -= batch.size
            self.incomplete.discard(batch)

    def abandon_all(self) -> Iterator[ProducerBatch]:
        """Take every batch still queued or open (close without waiting)."""
        for queue in self.queues.values():
            yield from queue
            queue.clear()
        self.sealed_count = 0
        for batches in self._open.values():
            yield from batches.values()
            batches.clear()
