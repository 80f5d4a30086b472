"""klog.aio.AIOConsumer: the asyncio consumer, a thin I/O layer over `ConsumerProtocol`.

The same protocol object and the same shared part (`klog.consumer.base`) as the blocking
`klog.Consumer`; the waits are coroutines over `klog.aio.wire`.

Example::

    async with klog.aio.AIOConsumer(bootstrap_servers="127.0.0.1:9092",
                                    auto_offset_reset="earliest") as consumer:
        consumer.assign([klog.TopicPartition("clicks", 0)])
        async for record in consumer:      # waits for new records; never ends by itself
            print(record.offset, record.value)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from klog.aio.wire import AIONetwork
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


def _now_ms() -> int:
    return int(time.time() * 1000)


class AIOConsumer(ConsumerBase):
    """The asyncio Consumer: same options and methods as `klog.Consumer`; the ones that
    wait (poll, position, the lookups, close) are coroutines, iteration is ``async for``."""

    def __init__(self, **options: Any):
        super().__init__("AIOConsumer", options)
        self._network: AIONetwork | None = None
        self._stream: AsyncIterator[ConsumerRecord] | None = None

    def _net(self) -> AIONetwork:
        if self._network is None:  # made on first use, inside the running loop
            self._network = AIONetwork(
                self.config.bootstrap_servers, client_id=self.config.client_id,
                request_timeout_ms=self.config.request_timeout_ms,
                address_of=self._core.cluster.address_of)
        return self._network

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._network is not None:
                await self._network.close()

    def statistics(self) -> dict[str, int]:
        self._net()
        return super().statistics()

    async def position(self, partition: TopicPartition | tuple[str, int],
                       timeout_ms: int | None = None) -> int:
        tp = TopicPartition(*partition)
        offset = self._cursor_position(tp)
        if offset is not None:
            return offset
        await self._wait_for(lambda: self._core.position(tp) is not None, timeout_ms,
                             f"the position of {tp.topic}[{tp.partition}]")
        return self._core.position(tp)  # type: ignore[return-value]

    async def partitions_for_topic(self, topic: str, timeout_ms: int | None = None
                                   ) -> set[int]:
        await self._wait_for(self._want_metadata(topic), timeout_ms,
                             f"the metadata of {topic!r}")
        return self._metadata_answer(topic)

    async def offsets_for_times(self, timestamps: dict[TopicPartition, int],
                                timeout_ms: int | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        check_timestamps(timestamps)
        return as_offsets_and_timestamps(await self._lookup(timestamps, timeout_ms))

    async def beginning_offsets(self, partitions: Iterable[TopicPartition],
                                timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        return as_offsets(await self._lookup({tp: EARLIEST for tp in partitions}, timeout_ms))

    async def end_offsets(self, partitions: Iterable[TopicPartition],
                          timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        return as_offsets(await self._lookup({tp: LATEST for tp in partitions}, timeout_ms))

    async def _lookup(self, wanted, timeout_ms):
        self._check_open()
        lookup = self._core.lookup(wanted)
        await self._wait_for(lambda: lookup.done, timeout_ms, "ListOffsets")
        if lookup.error is not None:
            raise lookup.error
        return lookup.results

    async def poll(self, timeout_ms: int = 0, max_records: int | None = None
                   ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """As `klog.Consumer.poll`."""
        self._check_open()
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        self._finish_cursor()
        core = self._core
        while True:
            records = core.take_records(limit)
            if records:
                await self._pump(0)
                return records
            core.raise_pending()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            await self._pump(remaining)

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        self._check_open()
        if self._stream is None:
            self._stream = self._records_forever()
        return self._stream

    async def __anext__(self) -> ConsumerRecord:
        return await self.__aiter__().__anext__()

    async def _records_forever(self) -> AsyncIterator[ConsumerRecord]:
        try:
            while True:
                chunk = await self._next_chunk(self.config.consumer_timeout_ms)
                if chunk is None:
                    return
                cursor = self._cursor = Cursor(*chunk)
                for record in cursor.iterator:
                    yield record
                self._cursor = None
        finally:
            self._stream = self._cursor = None

    async def _next_chunk(self, timeout_ms: int | None):
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        core = self._core
        while True:
            chunk = core.take_chunk()
            if chunk is not None:
                await self._pump(0)
                if chunk[1]:
                    return chunk
                continue
            core.raise_pending()
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return None
            await self._pump(remaining)

    async def _pump(self, timeout_s: float) -> None:
        core, network = self._core, self._net()
        now_ms = _now_ms()
        for request in core.poll(now_ms):
            await network.send(request)
        wait_s = min(timeout_s, (core.next_poll_ms(now_ms) - now_ms) / 1000)
        events = await network.poll(wait_s)
        if events:
            now_ms = _now_ms()
            deliver(core, events, now_ms)
            for request in core.poll(now_ms):
                await network.send(request)

    async def _wait_for(self, done: Callable[[], bool], timeout_ms: int | None,
                        what: str) -> None:
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
            await self._pump(remaining)
