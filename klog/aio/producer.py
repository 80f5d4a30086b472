"""klog.aio.AIOProducer: the asyncio producer, a thin I/O layer over `ProducerProtocol`.

The same protocol object as the blocking `klog.Producer`; here a sender *task* drives it
through `klog.aio.wire`, and batch futures are asyncio futures. ``await send(...)`` returns
an awaitable handle at once unless the topic's metadata is unknown or the buffer is full
(then it waits, up to ``max_block_ms``); ``send_nowait`` raises WouldBlockError instead.

Example::

    async with klog.aio.AIOProducer(bootstrap_servers="127.0.0.1:9092") as producer:
        pending = await producer.send("clicks", b"hello", key=b"user-1")
        metadata = await pending                  # RecordMetadata(topic='clicks', ...)

Transactions are the blocking producer's calls, awaited: ``await init_transactions()``,
``begin_transaction()``, ``await send_offsets_to_transaction(...)``,
``await commit_transaction()``, ``await abort_transaction()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Generator, Iterable
from typing import Any

from klog.aio.wire import AIONetwork
from klog.config import ProducerConfig, build
from klog.errors import ClosedError, KafkaTimeoutError, TransactionStateError, WouldBlockError
from klog.outgoing import deliver
from klog.producer.fast_send import compiled_send
from klog.producer.futures import RecordHandle, metadata_of
from klog.producer.producer_machine import ProducerProtocol
from klog.tls import ssl_context_of
from klog.types import RecordMetadata

log = logging.getLogger("klog.producer")
_new = tuple.__new__


def _now_ms() -> int:
    return int(time.time() * 1000)


class AIOFutureRecordMetadata(RecordHandle):
    """``await handle`` -> RecordMetadata, or the typed error that failed the record."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        batch, index = self
        value = yield from batch.future.__await__()
        return metadata_of(batch, index, value)

    def done(self) -> bool:
        return self[0].future.done()

    def result(self) -> RecordMetadata:
        """The metadata of a done record (asyncio.InvalidStateError before)."""
        batch, index = self
        return metadata_of(batch, index, batch.future.result())


class AIOFutureRecordMetadataList:
    """``await handle`` -> list[RecordMetadata] for a send_batch."""

    __slots__ = ("_spans",)

    def __init__(self, spans):
        self._spans = spans

    def __await__(self) -> Generator[Any, None, list[RecordMetadata]]:
        results = []
        for batch, first, count in self._spans:
            value = yield from batch.future.__await__()
            results.extend(metadata_of(batch, i, value) for i in range(first, first + count))
        return results


def _compiled(fast, topic: str, value, key, headers, partition, timestamp_ms):
    """The handle of the compiled append (`fast`) for a call it may take (a topic and its
    value or values, nothing else), or None: the Python path's turn."""
    if (fast is None or key is not None or headers is not None or partition is not None
            or timestamp_ms is not None):
        return None
    return fast(topic, value)


def _not_compiled(topic: str, values) -> None:
    """The compiled send_batch's Python path: None, so that ``send_batch`` goes on with its
    own (the append, or the wait for metadata or buffer space)."""
    return None


class AIOProducer:
    """The asyncio Producer: same options as `klog.Producer`; use ``async with``, or
    ``await start()`` and ``await close()``."""

    def __init__(self, **options: Any):
        self.config: ProducerConfig = build(ProducerConfig, "AIOProducer", options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._core = ProducerProtocol(self.config, new_future=self._new_future)
        self._network: AIONetwork | None = None
        self._task: asyncio.Task | None = None
        self._changed: asyncio.Condition | None = None
        self._closed = False
        self._stopping = False
        self._force = False
        # send_nowait(topic, value) and send's append compiled where they only append
        # (klog/producer/fast_send.py), made at start(); None: the Python path's alone
        self._fast_sends: list = []
        self._fast_append = None
        self._fast_batch = None

    def _new_future(self) -> asyncio.Future:
        assert self._loop is not None
        return self._loop.create_future()

    async def start(self) -> AIOProducer:
        if self._task is None:
            self._loop = asyncio.get_running_loop()
            self._changed = asyncio.Condition()
            self._network = AIONetwork(
                self.config.bootstrap_servers, client_id=self.config.client_id,
                request_timeout_ms=self.config.request_timeout_ms,
                address_of=self._core.address_of,
                ssl_context=ssl_context_of(self.config), security=self.config.security)
            self._task = asyncio.ensure_future(self._run())
            self._compile_sends()
        return self

    def _compile_sends(self) -> None:
        """The compiled send (klog/producer/_sendc.c) for ``send_nowait(topic, value)`` and
        for the appends of ``await send(topic, value)`` and ``await send_batch(topic,
        values)``: the blocking producer's, with a lock of their own that nothing else takes
        (every append runs on this loop's thread)."""
        lock = threading.Lock()
        fast_nowait = compiled_send(self, self.send_nowait, lock, AIOFutureRecordMetadata)
        if fast_nowait is None:
            return
        fast_append = compiled_send(self, self._handle_or_none, lock, AIOFutureRecordMetadata,
                                    slow_batch=_not_compiled,
                                    list_type=AIOFutureRecordMetadataList)
        self._fast_sends = [fast_nowait, fast_append]
        self.send_nowait = fast_nowait.send  # type: ignore[method-assign]
        self._fast_append = fast_append.send
        self._fast_batch = fast_append.send_batch

    def _handle_or_none(self, topic: str, value: Any) -> AIOFutureRecordMetadata | None:
        """The Python path of ``_fast_append``: the handle, or None when send must wait."""
        added = self._append(topic, value, None, None, None, None)
        return None if added is None else _new(AIOFutureRecordMetadata, added)

    async def __aenter__(self) -> AIOProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # sending ------------------------------------------------------------------------------

    def send_nowait(self, topic: str, value: Any = None, key: Any = None, headers=None,
                    partition: int | None = None, timestamp_ms: int | None = None
                    ) -> AIOFutureRecordMetadata:
        """Queue one record or raise WouldBlockError (metadata unknown, buffer full)."""
        added = self._append(topic, value, key, headers, partition, timestamp_ms)
        if added is None:
            raise WouldBlockError(f"send to {topic!r} would block (no metadata yet, or "
                                  "buffer_memory is full)")
        return _new(AIOFutureRecordMetadata, added)

    async def send(self, topic: str, value: Any = None, key: Any = None, headers=None,
                   partition: int | None = None, timestamp_ms: int | None = None
                   ) -> AIOFutureRecordMetadata:
        """Queue one record; returns an awaitable for its RecordMetadata."""
        handle = _compiled(self._fast_append, topic, value, key, headers, partition,
                           timestamp_ms)
        if handle is not None:
            return handle
        added = self._append(topic, value, key, headers, partition, timestamp_ms)
        while added is None:
            await self._wait_until_sendable(topic)
            added = self._append(topic, value, key, headers, partition, timestamp_ms)
        return _new(AIOFutureRecordMetadata, added)

    def _append(self, topic, value, key, headers, partition, timestamp_ms):
        if self._closed or self._task is None:
            raise ClosedError("send() on a producer that is closed or not started")
        if self._core.transactions is not None:
            self._core.transactions.check_send()
        config = self.config
        if config.value_serializer is not None:
            value = config.value_serializer(value)
        if key is not None and config.key_serializer is not None:
            key = config.key_serializer(key)
        now_ms = _now_ms()
        added = self._core.append(topic, partition, key, value, headers,
                                  now_ms if timestamp_ms is None else timestamp_ms, now_ms)
        if added is not None and added[1] == 0:
            self._network.wakeup()
        return added

    async def send_batch(self, topic: str, values: Iterable[Any], key: Any = None,
                         headers=None, partition: int | None = None,
                         timestamp_ms: int | None = None) -> AIOFutureRecordMetadataList:
        """Queue many values for one partition with one key; awaitable list of metadata."""
        handle = _compiled(self._fast_batch, topic, values, key, headers, partition,
                           timestamp_ms)
        if handle is not None:
            return handle
        if self._closed or self._task is None:
            raise ClosedError("send_batch() on a producer that is closed or not started")
        if self._core.transactions is not None:
            self._core.transactions.check_send()
        config = self.config
        values = list(values) if config.value_serializer is None else [
            config.value_serializer(v) for v in values]
        if key is not None and config.key_serializer is not None:
            key = config.key_serializer(key)
        while True:
            now_ms = _now_ms()
            spans = self._core.append_many(topic, partition, key, values, headers,
                                           now_ms if timestamp_ms is None else timestamp_ms,
                                           now_ms)
            if spans is not None:
                break
            await self._wait_until_sendable(topic)
        if any(first == 0 for _, first, _ in spans):
            self._network.wakeup()
        return AIOFutureRecordMetadataList(spans)

    async def _wait_until_sendable(self, topic: str) -> None:
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        core = self._core
        async with self._changed:
            while core.partition_count(topic) is None or core.memory_full:
                if self._closed:
                    raise ClosedError("send() after the producer was closed")
                self._network.wakeup()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    error = core.cluster.errors.get(topic)
                    raise KafkaTimeoutError(
                        f"{topic!r}: no metadata or no buffer space after max_block_ms="
                        f"{self.config.max_block_ms}" + (f" ({error.name})" if error else ""))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    # transactions (see `klog.Producer` for what each does) ---------------------------------

    async def init_transactions(self, timeout: float | None = None) -> None:
        await self._txn_wait(self._core.init_transactions, timeout, "init_transactions")

    def begin_transaction(self) -> None:
        if self._closed or self._task is None:
            raise ClosedError("begin_transaction() on a producer that is closed or not started")
        self._core.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any,
                                          timeout: float | None = None) -> None:
        await self._txn_wait(
            lambda: self._core.send_offsets_to_transaction(offsets, group_metadata), timeout,
            "send_offsets_to_transaction")

    async def commit_transaction(self, timeout: float | None = None) -> None:
        await self._txn_wait(self._core.commit_transaction, timeout, "commit_transaction")

    async def abort_transaction(self, timeout: float | None = None) -> None:
        await self._txn_wait(self._core.abort_transaction, timeout, "abort_transaction")

    async def _txn_wait(self, start, timeout: float | None, what: str) -> None:
        if self._closed or self._task is None:
            raise ClosedError(f"{what}() on a producer that is closed or not started")
        if self._core.transactions is None:
            raise TransactionStateError(f"{what}() needs a producer with a transactional_id")
        future = start()
        if future is None:
            return
        self._network.wakeup()
        try:  # shielded: a timeout leaves the step running, to be awaited again
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise KafkaTimeoutError(f"{what}() did not finish within {timeout} s; it goes on: "
                                    f"call {what}() again to keep waiting") from None

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until acknowledged or failed."""
        futures = [batch.future for batch in self._core.begin_flush()]
        if self._network is not None:
            self._network.wakeup()
        if futures:
            _, pending = await asyncio.wait(futures, timeout=timeout)
            if pending:
                raise KafkaTimeoutError(f"flush: {len(pending)} batch(es) still unacknowledged "
                                        f"after {timeout} s")

    async def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` s), stop the sender task, close connections."""
        if self._closed:
            return
        try:
            if self._task is not None:
                await self.flush(timeout)
        except KafkaTimeoutError:
            log.warning("close: records left unsent after %s s", timeout)
            self._force = True
        finally:
            self._closed = self._stopping = True
            for fast in self._fast_sends:
                fast.disable()  # a send_nowait kept from before must fail too
            if self._task is not None:
                self._network.wakeup()
                await self._task
            if self._core.transactions is not None:
                self._core.transactions.fail_all(ClosedError("the producer was closed"))

    # the sender task ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._loop_forever()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("the producer's sender task failed")
            self._core.abort(ClosedError(f"the producer's sender failed: {exc!r}"),
                             in_flight=True)
            await self._resolve()
            raise
        finally:
            await self._network.close()

    async def _loop_forever(self) -> None:
        core, network = self._core, self._network
        while True:
            if self._stopping:
                core.abort(in_flight=self._force)
            now_ms = _now_ms()
            outgoing = core.poll(now_ms)
            wait_ms = core.next_poll_ms(now_ms) - now_ms
            await self._resolve()
            if self._stopping and (self._force or not outgoing and network.in_flight() == 0):
                return
            for request in outgoing:
                await network.send(request)
            events = await network.poll(wait_ms / 1000)
            now_ms = _now_ms()
            deliver(core, events, now_ms)
            await self._resolve(notify=bool(events))

    async def _resolve(self, notify: bool = False) -> None:
        done = self._core.take_completed()
        for batch, value in done:
            if batch.future.done():
                continue
            if isinstance(value, BaseException):
                batch.future.set_exception(value)
            else:
                batch.future.set_result(value)
        if done or notify:
            async with self._changed:
                self._changed.notify_all()
