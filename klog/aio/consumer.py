"""klog.aio.AIOConsumer: the asyncio consumer, a thin I/O layer over `ConsumerProtocol`.

The same protocol object and the same shared part (`klog.consumer.base`) as the blocking
`klog.Consumer`; the waits are coroutines over `klog.aio.wire`. A group member also runs a
heartbeat task: while the application is busy between polls (awaiting something else), it
drives the same protocol object for a moment every so often, so heartbeats go out (the
blocking consumer has a thread for that). Rebalance listeners may be coroutine functions.

Example::

    async with klog.aio.AIOConsumer(bootstrap_servers="127.0.0.1:9092", group_id="loaders",
                                    auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["clicks"])
        async for record in consumer:      # waits for new records; never ends by itself
            print(record.offset, record.value)
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
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
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.consumer.cursor import Cursor
from klog.consumer.group import Assign, CommitDone, Revoke
from klog.errors import KafkaTimeoutError, KlogError
from klog.outgoing import deliver
from klog.protocol.records_columns import RecordColumns
from klog.tls import ssl_context_of
from klog.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition


def _now_ms() -> int:
    return int(time.time() * 1000)


class AIOConsumer(ConsumerBase):
    """The asyncio Consumer: same options and methods as `klog.Consumer`; the ones that
    wait (poll, position, the lookups, commit, committed, unsubscribe, close) are
    coroutines, iteration is ``async for``."""

    def __init__(self, **options: Any):
        super().__init__("AIOConsumer", options)
        self._network: AIONetwork | None = None
        self._stream: AsyncIterator[ConsumerRecord] | None = None
        self._pump_lock: asyncio.Lock | None = None
        self._heartbeat_task: asyncio.Task | None = None

    def _net(self) -> AIONetwork:
        if self._network is None:  # made on first use, inside the running loop
            self._network = AIONetwork(
                self.config.bootstrap_servers, client_id=self.config.client_id,
                request_timeout_ms=self.config.request_timeout_ms,
                address_of=self._core.address_of, ssl_context=ssl_context_of(self.config),
                security=self.config.security)
            self._pump_lock = asyncio.Lock()
        return self._network

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """As `klog.Consumer.close`."""
        if self._closed:
            return
        try:
            if self._core.group is not None and self._network is not None:
                await self._give_up()
        finally:
            self._closed = True
            if self._heartbeat_task is not None:
                self._heartbeat_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._heartbeat_task
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
        limit = max_records or self.config.max_poll_records
        return await self._poll_for(lambda core: core.take_records(limit), timeout_ms)

    async def poll_columns(self, timeout_ms: int = 0) -> dict[TopicPartition, RecordColumns]:
        """As `klog.Consumer.poll_columns`: every buffered fetch as columns, one
        `RecordColumns` per partition (no Python object per record, no ``max_records``
        limit, raw keys and values)."""
        return await self._poll_for(lambda core: core.take_columns(), timeout_ms)

    async def _poll_for(self, take: Callable[[ConsumerProtocol], dict],
                        timeout_ms: int) -> dict:
        """Drive the network until ``take(core)`` gives something or ``timeout_ms`` passed
        (the blocking consumer's loop, awaited)."""
        self._check_open()
        deadline = time.monotonic() + timeout_ms / 1000
        self._finish_cursor()
        self._polled(_now_ms())
        core = self._core
        pumped = False
        while True:
            await self._run_events()
            taken = take(core)
            if taken:
                await self._pump(0)  # pipelining: the next fetch goes out before we return
                return taken
            core.raise_pending()
            remaining = deadline - time.monotonic()
            if remaining <= 0 and pumped:
                return {}
            await self._pump(max(remaining, 0))  # poll(0) too drives the network once
            pumped = True

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
                del chunk
                for record in cursor.iterator:
                    yield record
                # the chunk handed out is done: free it before the next is decoded
                self._cursor = cursor = record = None
        finally:
            self._stream = self._cursor = None

    async def _next_chunk(self, timeout_ms: int | None):
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        self._polled(_now_ms())
        core = self._core
        while True:
            await self._run_events()
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
        network = self._net()
        self._start_heartbeat()
        async with self._pump_lock:  # type: ignore[union-attr]
            await self._pump_locked(network, timeout_s)

    async def _pump_locked(self, network: AIONetwork, timeout_s: float) -> None:
        core = self._core
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

    # groups -------------------------------------------------------------------------------

    async def commit(self, offsets: dict | None = None, asynchronous: bool = False,
                     callback: Callable | None = None, timeout_ms: int | None = None) -> None:
        """As `klog.Consumer.commit` (the callback may be a coroutine function)."""
        self._check_open()
        group = self._group("commit()")
        wanted = self._offsets_to_commit(offsets)
        if asynchronous:
            group.commit(wanted, retry=False, callback=callback)
            await self._pump(0)
            return
        pending = group.commit(wanted, retry=True)
        await self._wait_or_cancel(pending, timeout_ms, "OffsetCommit")
        if pending.error is not None:
            raise pending.error

    async def commit_async(self, offsets: dict | None = None,
                           callback: Callable | None = None) -> None:
        await self.commit(offsets, asynchronous=True, callback=callback)

    async def committed(self, partitions: Iterable[TopicPartition] | TopicPartition,
                        timeout_ms: int | None = None) -> dict[TopicPartition, int | None]:
        """As `klog.Consumer.committed`."""
        self._check_open()
        group = self._group("committed()")
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        lookup = group.committed(partitions)
        await self._wait_or_cancel(lookup, timeout_ms, "OffsetFetch")
        if lookup.error is not None:
            raise lookup.error
        return {tp: None if found is None else found.offset
                for tp, found in lookup.results.items()}

    async def unsubscribe(self) -> None:
        """As `klog.Consumer.unsubscribe`."""
        self._check_open()
        if self._core.group is not None:
            await self._give_up()
        self._cut_cursor(lambda tp: True)
        self._core.assign([])

    async def _wait_or_cancel(self, item, timeout_ms: int | None, what: str) -> None:
        try:
            await self._wait_for(lambda: item.done, timeout_ms, what)
        except KafkaTimeoutError:
            self._core.group.commits.cancel(item)  # type: ignore[union-attr]
            raise

    async def _commit_quietly(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if offsets:
            with contextlib.suppress(KlogError):
                await self.commit(offsets)

    async def _run_events(self) -> None:
        group = self._core.group
        if group is None or self._in_listener:
            return
        self._in_listener = True
        try:
            while (event := group.next_event()) is not None:
                await self._handle(event)
        finally:
            self._in_listener = False

    async def _handle(self, event) -> None:
        if isinstance(event, CommitDone):
            commit = event.commit
            await _call(commit.callback, commit.offsets, commit.error)
        elif isinstance(event, Assign):
            if self._listener.on_assign is not None:
                await _call(self._listener.on_assign, set(event.partitions))
        else:
            await self._revoke(event)

    async def _revoke(self, event: Revoke) -> None:
        callback = self._listener_for(event)
        try:
            if not event.lost and self.config.auto_commit:
                await self._commit_quietly(self._positions(event.partitions))
            if callback is not None and event.partitions:
                await _call(callback, set(event.partitions))
        finally:
            self._cut_cursor(lambda tp: tp in event.partitions)
            self._core.group.revoked(event)  # type: ignore[union-attr]

    async def _give_up(self) -> None:
        group = self._core.group
        membership = group.membership  # type: ignore[union-attr]
        if not group.subscribed.active:  # type: ignore[union-attr]
            if self.config.auto_commit:
                await self._commit_quietly(self._positions())
            return
        owned, lost = membership.owned, membership.generation < 0
        if owned:
            self._in_listener = True
            try:
                await self._revoke(Revoke(owned, lost=lost))
            finally:
                self._in_listener = False
        group.events.clear()  # type: ignore[union-attr]
        if group.unsubscribe() is not None:  # type: ignore[union-attr]
            with contextlib.suppress(KlogError):
                await self._wait_for(lambda: membership.leaving is None, None, "LeaveGroup")

    def _start_heartbeat(self) -> None:
        group = self._core.group
        if (self._heartbeat_task is None and group is not None and group.subscribed.active
                and not self._closed):
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat())

    async def _heartbeat(self) -> None:
        """While nobody else drives the network, drive it briefly every quarter heartbeat
        interval: heartbeats (and a max_poll_interval_ms leave) go out on time."""
        tick_s = max(0.05, min(self.config.heartbeat_interval_ms / 4000, 1.0))
        while not self._closed:
            await asyncio.sleep(tick_s)
            if not self._pump_lock.locked() and not self._closed:  # type: ignore[union-attr]
                with contextlib.suppress(KlogError):
                    await self._pump(0)


async def _call(callback: Callable, *args) -> None:
    """Call a listener or callback; await it if it is a coroutine function."""
    result = callback(*args)
    if inspect.isawaitable(result):
        await result
