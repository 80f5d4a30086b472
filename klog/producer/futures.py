"""What ``send`` returns: a light handle on one record of a batch, not a future per record.

A batch has one real future (made by the I/O flavour); a record's handle is two slots, the
batch and the record's index, so ``send`` allocates no lock or condition per message. The
handle turns the batch's answer ``(base_offset, log_append_time_ms, log_start_offset)`` into
the record's ``RecordMetadata`` when asked. ``FutureRecordMetadata`` (kafka-python's name) wraps
a ``concurrent.futures.Future``; the asyncio flavour has its own awaitable handles in
``klog.aio``, over the same batches.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
from typing import Any

from klog.errors import KafkaTimeoutError
from klog.producer.batch import ProducerBatch
from klog.types import RecordMetadata


def metadata_of(batch: ProducerBatch, index: int, value: tuple[int, int, int]) -> RecordMetadata:
    base_offset, append_time_ms, log_start_offset = value
    offset = base_offset + index if base_offset >= 0 else -1
    timestamp = append_time_ms if append_time_ms >= 0 else batch.timestamp_of(index)
    return RecordMetadata(batch.topic, batch.partition, offset, timestamp, log_start_offset)


def _wait(future: concurrent.futures.Future, timeout: float | None, what: str):
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        raise KafkaTimeoutError(f"{what} not acknowledged within {timeout} s") from None


class RecordHandle(tuple):
    """``(batch, index)``: a tuple, so that making one per send costs one small allocation."""

    __slots__ = ()

    @property
    def _batch(self) -> ProducerBatch:
        return self[0]

    @property
    def _index(self) -> int:
        return self[1]


class FutureRecordMetadata(RecordHandle):
    """The pending delivery of one record: ``result(timeout)`` returns its RecordMetadata or
    raises the typed error that failed it (KafkaError, KafkaTimeoutError, ClosedError, ...)."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait up to ``timeout`` seconds (None: forever); KafkaTimeoutError after that."""
        batch, index = self
        value = _wait(batch.future, timeout, f"a record for {batch.topic}[{batch.partition}]")
        return metadata_of(batch, index, value)

    get = result  # kafka-python's spelling

    def done(self) -> bool:
        return self._batch.future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except KafkaTimeoutError:
            if not self._batch.future.done():
                raise
            return self._batch.future.exception()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, not raised
            return exc
        return None

    def add_done_callback(self, fn: Callable[[FutureRecordMetadata], Any]) -> None:
        """Call ``fn(self)`` when the record is acknowledged or failed (on the sender
        thread: keep it short)."""
        self._batch.future.add_done_callback(lambda _: fn(self))

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"<FutureRecordMetadata {self._batch.topic}[{self._batch.partition}] {state}>"


class FutureRecordMetadataList:
    """The pending delivery of a ``send_batch``: ``result(timeout)`` -> list[RecordMetadata]."""

    __slots__ = ("_spans",)

    def __init__(self, spans: list[tuple[ProducerBatch, int, int]]):
        self._spans = spans

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for batch, first, count in self._spans:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            value = _wait(batch.future, left, f"records for {batch.topic}[{batch.partition}]")
            results.extend(metadata_of(batch, i, value) for i in range(first, first + count))
        return results

    get = result

    def done(self) -> bool:
        return all(batch.future.done() for batch, _, _ in self._spans)
