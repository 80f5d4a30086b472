"""klog.Producer: the blocking producer, a thin I/O layer over `ProducerProtocol`.

The caller's thread encodes nothing: ``send`` appends the record to its partition's open batch
under a lock and returns. A background sender thread (as in Kafka's Java client) drives the
protocol object: it seals lingering batches, encodes and sends them through `klog.wire`,
takes the answers, and resolves the batch futures outside the lock. The thread sleeps in a
selector and is woken when a batch opens or fills, on flush and on close.

Example::

    with klog.Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as producer:
        future = producer.send("clicks", b'{"page": "/"}', key=b"user-42")
        print(future.result(timeout=10))   # RecordMetadata(topic='clicks', partition=3, ...)
        producer.send_batch("clicks", [b"a", b"b", b"c"])   # the paper's send(topic, messages)

A transactional producer (``transactional_id=...``; Kafka's semantics, KIP-98/447) writes to
many partitions and commits a consumer's offsets atomically; the transaction's calls are in
`TransactionalCalls`::

    producer = klog.Producer(bootstrap_servers=..., transactional_id="etl-1")
    producer.init_transactions(10)              # fences earlier producers with this id
    producer.begin_transaction()
    producer.send("out", b"...")
    producer.send_offsets_to_transaction({tp: next_offset}, consumer.group_metadata(), 10)
    producer.commit_transaction(10)             # or abort_transaction(10)
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from klog.config import ProducerConfig, build
from klog.errors import ClosedError, KafkaTimeoutError
from klog.outgoing import deliver
from klog.producer.blocking_txn import TransactionalCalls
from klog.producer.fast_send import compiled_send
from klog.producer.futures import FutureRecordMetadata, FutureRecordMetadataList
from klog.producer.producer_machine import ProducerProtocol
from klog.tls import ssl_context_of
from klog.wire import Network

log = logging.getLogger("klog.producer")
Headers = Sequence[tuple[str, bytes | None]] | None


_time_ns = time.time_ns  # ms by integer division: cheaper per send() than int(time() * 1000)
_new = tuple.__new__


def _now_ms() -> int:
    return _time_ns() // 1_000_000


class Producer(TransactionalCalls):
    """Publishes records to topics. Thread-safe: any number of threads may call ``send``.

    Options are Kafka's producer configs in snake_case (see `klog.config.ProducerConfig`):
    ``bootstrap_servers`` (required), ``acks`` (0, 1, "all"), ``linger_ms``, ``batch_size``,
    ``compression_type`` ("gzip", "snappy", "lz4", "zstd"), ``enable_idempotence`` (on by
    default), ``retries``, ``retry_backoff_ms``, ``buffer_memory``, ``max_block_ms``, ...
    An unknown option raises TypeError, a bad value ValueError.

    Close it (``close()``, or ``with``): the sender is a daemon thread, so records still
    queued when the interpreter exits without a close are lost, as with Kafka's Java client.
    """

    def __init__(self, **options: Any):
        self.config: ProducerConfig = build(ProducerConfig, "Producer", options)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._core = ProducerProtocol(self.config, new_future=concurrent.futures.Future)
        self._network = Network(self.config.bootstrap_servers, client_id=self.config.client_id,
                                request_timeout_ms=self.config.request_timeout_ms,
                                address_of=self._core.address_of,
                                ssl_context=ssl_context_of(self.config),
                                security=self.config.security)
        self._closed = False
        self._stopping = False
        self._force = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="klog-producer-sender",
                                        daemon=True)
        if self._core.transactions is not None:  # the plain send path stays as it is
            self.send = self._checked(self.send)  # type: ignore[method-assign]
            self.send_batch = self._checked(self.send_batch)  # type: ignore[method-assign]
        # send(topic, value) and send_batch(topic, values) compiled where they only append
        # (fast_send.py); None: Python's
        self._fast_send = compiled_send(self, self.send, slow_batch=self.send_batch)
        if self._fast_send is not None:
            self.send = self._fast_send.send  # type: ignore[method-assign]
            self.send_batch = self._fast_send.send_batch  # type: ignore[method-assign]
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # sending ------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Headers = None,
             partition: int | None = None, timestamp_ms: int | None = None
             ) -> FutureRecordMetadata:
        """Queue one record; returns its future at once (``.result(timeout)`` waits).

        Blocks only while the topic's metadata is unknown or ``buffer_memory`` is used up,
        for at most ``max_block_ms`` (then KafkaTimeoutError). Raises TypeError for a key
        or value that is not bytes (without a serializer), ClosedError after close().
        """
        config = self.config
        if config.value_serializer is not None:
            value = config.value_serializer(value)
        if key is not None and config.key_serializer is not None:
            key = config.key_serializer(key)
        now_ms = _time_ns() // 1_000_000
        if timestamp_ms is None:
            timestamp_ms = now_ms
        with self._lock:
            if self._closed:
                raise ClosedError("send() after the producer was closed")
            added = self._core.append(topic, partition, key, value, headers, timestamp_ms,
                                      now_ms)
            if added is None:
                self._wait_until_sendable(topic)
                added = self._core.append(topic, partition, key, value, headers, timestamp_ms,
                                          now_ms)
        if added[1] == 0:  # a batch opened (and maybe one filled): the sender has work
            self._network.wakeup()
        return _new(FutureRecordMetadata, added)

    def send_batch(self, topic: str, values: Iterable[Any], key: Any = None,
                   headers: Headers = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> FutureRecordMetadataList:
        """Queue many values for one partition with one key (the paper's send(topic,
        messages)); ``.result(timeout)`` gives a RecordMetadata per value, in order."""
        config = self.config
        values = list(values) if config.value_serializer is None else [
            config.value_serializer(v) for v in values]
        if key is not None and config.key_serializer is not None:
            key = config.key_serializer(key)
        now_ms = _now_ms()
        if timestamp_ms is None:
            timestamp_ms = now_ms
        with self._lock:
            if self._closed:
                raise ClosedError("send_batch() after the producer was closed")
            spans = self._core.append_many(topic, partition, key, values, headers,
                                           timestamp_ms, now_ms)
            if spans is None:
                self._wait_until_sendable(topic)
                spans = self._core.append_many(topic, partition, key, values, headers,
                                               timestamp_ms, now_ms)
        if any(first == 0 for _, first, _ in spans):
            self._network.wakeup()
        return FutureRecordMetadataList(spans)

    def _wait_until_sendable(self, topic: str) -> None:
        """Under the lock: wait for the topic's metadata and for buffer space."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        core = self._core
        while True:
            if self._closed:
                raise ClosedError("send() after the producer was closed")
            if self._failure is not None:
                raise ClosedError(f"the producer's sender failed: {self._failure!r}")
            count = core.partition_count(topic)
            if count is not None and not core.memory_full:
                return
            if count is None:
                self._network.wakeup()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(self._blocked_reason(topic, count))
            self._changed.wait(remaining)

    def _blocked_reason(self, topic: str, count: int | None) -> str:
        waited = f"after max_block_ms={self.config.max_block_ms}"
        if count is None:
            cluster = self._core.cluster
            error = cluster.errors.get(topic)
            detail = f" (the broker says {error.name})" if error is not None else ""
            if cluster.last_error:
                detail += f" (no metadata: {cluster.last_error})"
            return f"topic {topic!r} not in the metadata {waited}{detail}"
        return (f"buffer_memory={self.config.buffer_memory} bytes still full {waited}: "
                "the brokers take records slower than they are sent")

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger) and wait until it is acknowledged or
        failed; KafkaTimeoutError if that takes longer than ``timeout`` seconds."""
        with self._lock:
            futures = [batch.future for batch in self._core.begin_flush()]
        self._network.wakeup()
        if futures:
            _, pending = concurrent.futures.wait(futures, timeout)
            if pending:
                raise KafkaTimeoutError(f"flush: {len(pending)} batch(es) still unacknowledged "
                                        f"after {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then stop the sender and close connections.
        Records still unsent after the timeout fail with ClosedError. Idempotent."""
        with self._lock:
            if self._closed:
                return
        force = False
        try:
            self.flush(timeout)
        except KafkaTimeoutError:
            log.warning("close: records left unsent after %s s", timeout)
            force = True
        finally:
            with self._lock:
                self._closed = True
                if self._fast_send is not None:
                    self._fast_send.disable()  # a send() kept from before must fail too
                self._stopping = True
                self._force = force
                self._changed.notify_all()
            self._network.wakeup()
            if threading.current_thread() is not self._thread:
                self._thread.join()
            if self._core.transactions is not None:
                with self._lock:
                    self._core.transactions.fail_all(ClosedError("the producer was closed"))

    def statistics(self) -> dict[str, int]:
        """Counters: bytes buffered, batches not yet completed or waiting to be sent,
        batch attempts retried so far."""
        with self._lock:
            return {"buffered_bytes": self._core.accumulator.buffered_bytes,
                    "incomplete_batches": len(self._core.accumulator.incomplete),
                    "sealed_batches": self._core.accumulator.sealed_count,
                    "retries": self._core.retries}

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (waits for metadata up to max_block_ms)."""
        with self._lock:
            if self._core.partition_count(topic) is None:
                self._wait_until_sendable(topic)
            return set(range(self._core.partition_count(topic) or 0))

    # the sender thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug: fail what is pending rather than hang
            log.exception("the producer's sender thread failed")
            with self._lock:
                self._failure = exc
                self._core.abort(ClosedError(f"the producer's sender failed: {exc!r}"))
                done = self._core.take_completed()
                self._changed.notify_all()
            _resolve(done)
        finally:
            self._network.close()

    def _loop(self) -> None:
        core, network, lock = self._core, self._network, self._lock
        while True:
            with lock:
                if self._stopping:
                    core.abort(in_flight=self._force)
                now_ms = _now_ms()
                outgoing = core.poll(now_ms)
                wait_ms = core.next_poll_ms(now_ms) - now_ms
                done = core.take_completed()
                if done:
                    self._changed.notify_all()
                stop = self._stopping and (self._force or not outgoing
                                           and network.in_flight() == 0)
            _resolve(done)
            if stop:
                break
            for request in outgoing:
                network.send(request)
            events = network.poll(wait_ms / 1000)
            if not events:
                continue
            with lock:
                now_ms = _now_ms()
                deliver(core, events, now_ms)
                done = core.take_completed()
                self._changed.notify_all()
            _resolve(done)


def _resolve(done: list) -> None:
    for batch, value in done:
        if isinstance(value, BaseException):
            batch.future.set_exception(value)
        else:
            batch.future.set_result(value)
