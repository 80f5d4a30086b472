"""klog.Consumer: the blocking consumer, a thin I/O layer over `ConsumerProtocol`.

No background thread: the caller's ``poll`` (or iteration) drives the protocol object
through `klog.wire`. Fetches are pipelined all the same: when a Fetch answer arrives its
partition's next Fetch is sent *before* its records are decoded and returned, so the broker
prepares the next answer while the application works.

Example::

    consumer = klog.Consumer(bootstrap_servers="127.0.0.1:9092", auto_offset_reset="earliest")
    consumer.assign([klog.TopicPartition("clicks", 0)])
    for record in consumer:            # blocks for new records; never ends by itself
        print(record.offset, record.key, record.value)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from typing import Any

from klog.consumer.base import (
    EARLIEST,
    LATEST,
    ConsumerBase,
    as_offsets,
    as_offsets_and_timestamps,
    check_timestamps,
)
from klog.consumer.cursor import Cursor
from klog.errors import KafkaTimeoutError
from klog.outgoing import deliver
from klog.types import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from klog.wire import Network

_time = time.time


def _now_ms() -> int:
    return int(_time() * 1000)


class Consumer(ConsumerBase):
    """Reads records from assigned partitions. Not thread-safe (like Kafka's consumer).

    Options are Kafka's consumer configs in snake_case (see `klog.config.ConsumerConfig`):
    ``bootstrap_servers`` (required), ``auto_offset_reset`` ("earliest", "latest", "none"),
    ``fetch_min_bytes``, ``fetch_max_wait_ms``, ``fetch_max_bytes``,
    ``max_partition_fetch_bytes``, ``isolation_level``, ``max_poll_records``,
    ``consumer_timeout_ms`` (iteration stops after this long without records), ``group_id``
    (accepted; consumer groups are not implemented yet: use ``assign``).
    """

    def __init__(self, **options: Any):
        super().__init__("Consumer", options)
        self._network = Network(self.config.bootstrap_servers, client_id=self.config.client_id,
                                request_timeout_ms=self.config.request_timeout_ms,
                                address_of=self._core.cluster.address_of)
        self._stream: Iterator[ConsumerRecord] | None = None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the consumer cannot be used afterwards. Idempotent."""
        if not self._closed:
            self._closed = True
            self._network.close()

    def position(self, partition: TopicPartition | tuple[str, int],
                 timeout_ms: int | None = None) -> int:
        """The offset of the next record poll will return for ``partition`` (looked up
        first if needed; KafkaTimeoutError after ``timeout_ms``, default request_timeout_ms).
        """
        tp = TopicPartition(*partition)
        offset = self._cursor_position(tp)
        if offset is not None:
            return offset
        self._wait_for(lambda: self._core.position(tp) is not None, timeout_ms,
                       f"the position of {tp.topic}[{tp.partition}]")
        return self._core.position(tp)  # type: ignore[return-value]

    # lookups ------------------------------------------------------------------------------

    def partitions_for_topic(self, topic: str, timeout_ms: int | None = None) -> set[int]:
        """The partition numbers of ``topic`` (KafkaError if the broker has no such topic)."""
        self._wait_for(self._want_metadata(topic), timeout_ms, f"the metadata of {topic!r}")
        return self._metadata_answer(topic)

    def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                          timeout_ms: int | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is at or after the given one (ms),
        with that record's timestamp; None when no record is that recent."""
        check_timestamps(timestamps)
        return as_offsets_and_timestamps(self._lookup(timestamps, timeout_ms))

    def beginning_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The earliest offset of each partition (the log start)."""
        return as_offsets(self._lookup({tp: EARLIEST for tp in partitions}, timeout_ms))

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next record will get)."""
        return as_offsets(self._lookup({tp: LATEST for tp in partitions}, timeout_ms))

    def _lookup(self, wanted, timeout_ms):
        self._check_open()
        lookup = self._core.lookup(wanted)
        self._wait_for(lambda: lookup.done, timeout_ms, "ListOffsets")
        if lookup.error is not None:
            raise lookup.error
        return lookup.results

    # records ------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None
             ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched for the assigned partitions, grouped by partition: waits up to
        ``timeout_ms`` for at least one, returns ``{}`` if none came. At most
        ``max_records`` (default ``max_poll_records``). Raises the errors fetches met
        (OffsetOutOfRangeError with auto_offset_reset="none", KafkaError, ...)."""
        self._check_open()
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        self._finish_cursor()
        core = self._core
        while True:
            records = core.take_records(limit)
            if records:
                self._pump(0)  # pipelining: the next fetch goes out before we return
                return records
            core.raise_pending()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            self._pump(remaining)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Every record, forever: blocks for new ones (the paper's stream interface). With
        ``consumer_timeout_ms`` the iteration ends after that long without a record.

        The iterator chains the chunks' own list iterators, so handing out a record costs
        no Python code at all; the cursor reads the position back from them."""
        self._check_open()
        if self._stream is None:
            self._stream = chain.from_iterable(self._chunk_iterators())
        return self._stream

    def __next__(self) -> ConsumerRecord:
        return next(iter(self))

    def _chunk_iterators(self) -> Iterator[Iterator[ConsumerRecord]]:
        try:
            while True:
                chunk = self._next_chunk(self.config.consumer_timeout_ms)
                if chunk is None:
                    return
                self._cursor = Cursor(*chunk)
                yield self._cursor.iterator
        finally:
            self._stream = self._cursor = None

    def _next_chunk(self, timeout_ms: int | None):
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        core = self._core
        while True:
            chunk = core.take_chunk()
            if chunk is not None:
                self._pump(0)
                if chunk[1]:
                    return chunk
                continue
            core.raise_pending()
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._pump(remaining)

    # driving the protocol -----------------------------------------------------------------

    def _pump(self, timeout_s: float) -> None:
        """Send what the protocol wants, wait up to ``timeout_s`` for answers, absorb them,
        and send again at once (so a fresh Fetch follows every Fetch answer)."""
        core, network = self._core, self._network
        now_ms = _now_ms()
        for request in core.poll(now_ms):
            network.send(request)
        wait_s = min(timeout_s, (core.next_poll_ms(now_ms) - now_ms) / 1000)
        events = network.poll(wait_s)
        if events:
            now_ms = _now_ms()
            deliver(core, events, now_ms)
            for request in core.poll(now_ms):
                network.send(request)

    def _wait_for(self, done: Callable[[], bool], timeout_ms: int | None, what: str) -> None:
        self._check_open()
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        while not done():
            self._core.raise_pending()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = self._core.cluster.last_error
                raise KafkaTimeoutError(f"{what}: no answer within {timeout_ms} ms"
                                        + (f" ({reason})" if reason else ""))
            self._pump(remaining)
