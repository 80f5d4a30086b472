"""The producer's protocol state machine: records in, Produce requests out, answers in,
completed batches out. Sans-IO: no sockets, no threads, no clock (``now_ms`` is an argument).

Both I/O flavours drive the same object:

- the user's side: :meth:`partition_count` (None: metadata is needed first),
  :meth:`append` / :meth:`append_many`, :attr:`memory_full`, :meth:`begin_flush`;
- the sender's side: :meth:`poll` returns the requests to send now (Metadata, InitProducerId,
  and the Produce requests of `klog.producer.drain`), :meth:`on_response` /
  :meth:`on_failure` take the answers, :meth:`take_completed` hands out finished batches as
  ``(batch, value or exception)`` for the I/O layer to resolve their futures, and
  :meth:`next_poll_ms` says when poll has work again if nothing arrives.

Retries follow Kafka: retriable error codes and lost connections are retried after
``retry_backoff_ms`` until ``retries`` or ``delivery_timeout_ms`` run out; leadership errors
also refresh metadata; everything else fails the batch with a typed error.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from klog.config import ProducerConfig
from klog.errors import (
    ClosedError,
    KafkaTimeoutError,
    KlogError,
    MessageSizeTooLargeError,
    TransactionAbortableError,
    TransactionStateError,
    error_for,
)
from klog.metadata import ClusterMetadata
from klog.outgoing import Outgoing
from klog.producer.accumulator import (
    RECORD_OVERHEAD,
    Accumulator,
    headers_size,
    values_size,
)
from klog.producer.batch import ProducerBatch
from klog.producer.drain import drain
from klog.producer.fast_send import bytes_total
from klog.producer.partitioner import Partitioner
from klog.producer.sequences import Sequences
from klog.producer.transactions import (
    ABORTABLE_ERROR,
    COMMITTING,
    FATAL_ERROR,
    IN_TRANSACTION,
    TransactionManager,
)
from klog.protocol.apis import init_producer_id, metadata, produce
from klog.protocol.error_codes import ErrorCode
from klog.types import ConsumerGroupMetadata, OffsetAndMetadata

log = logging.getLogger(__name__)

def _take_hint(cluster, batch, part, endpoints: dict) -> bool:
    """Whether a NOT_LEADER_OR_FOLLOWER answer's KIP-951 hint (Produce v10) moved the
    partition to its new leader in `cluster`."""
    if part.error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return False
    hint = part.current_leader
    return cluster.leader_hint(batch.topic, batch.partition, hint.leader_id,
                               hint.leader_epoch, endpoints.get(hint.leader_id))


_SUCCESS = frozenset({ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER})
_STALE_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
})  # fmt: skip
_BYTES_LIKE = (bytes, bytearray, memoryview)
IDLE_POLL_MS = 1000


def check_payload(value, what: str) -> None:
    if value is not None and not isinstance(value, _BYTES_LIKE):
        raise TypeError(f"a record {what} must be bytes-like or None, not "
                        f"{type(value).__name__} (set {what}_serializer to convert it)")


def _explained(code: ErrorCode, message: str | None, batch: ProducerBatch,
               batch_size: int) -> str | None:
    """The broker's message, and for a refused batch of several records what to change: the
    batch, not one record, went over the topic's max.message.bytes."""
    if code != ErrorCode.MESSAGE_TOO_LARGE or batch.count < 2:
        return message
    hint = (f"a batch of {batch.count} records ({batch.size} bytes estimated) was refused; "
            f"set batch_size (now {batch_size}) below the topic's max.message.bytes")
    return f"{message}: {hint}" if message else hint


class ProducerProtocol:
    def __init__(self, config: ProducerConfig, *, new_future: Callable[[], Any], rng=None):
        self.config = config
        self.cluster = ClusterMetadata(max_age_ms=config.metadata_max_age_ms,
                                       retry_backoff_ms=config.retry_backoff_ms,
                                       allow_auto_create=True)
        self.partitioner = Partitioner(rng)
        self.accumulator = Accumulator(batch_size=config.batch_size,
                                       linger_ms=config.linger_ms,
                                       delivery_timeout_ms=config.delivery_timeout_ms,
                                       new_future=new_future,
                                       next_sticky=self.partitioner.next_sticky)
        self._buffer_memory = config.buffer_memory
        self._max_request_size = config.max_request_size
        self.sequences = Sequences(enabled=config.enable_idempotence,
                                   max_in_flight=config.max_in_flight_requests_per_connection)
        self._node_in_flight: Counter[int | None] = Counter()
        self._node_retry_at: dict[int, int] = {}
        self._completed: list[tuple[ProducerBatch, Any]] = []
        self._linger_due: int | None = None
        self.retries = 0  # batch attempts that failed and were queued again (statistics)
        self.transactions: TransactionManager | None = None
        if config.transactional_id is not None:
            self.transactions = TransactionManager(config, self.sequences, new_future)

    def address_of(self, node: int) -> tuple[str, int] | None:
        """Where a node listens: a coordinator's own answer first (it may come before any
        metadata), then the metadata."""
        if self.transactions is not None:
            address = self.transactions.address_of(node)
            if address is not None:
                return address
        return self.cluster.address_of(node)

    # the user's side ----------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``, or None (then it is wanted, and poll asks for it)."""
        count = self.cluster.partition_count(topic)
        if count is None:
            self.cluster.want((topic,))
        return count

    @property
    def memory_full(self) -> bool:
        return self.accumulator.buffered_bytes >= self._buffer_memory

    def append(self, topic: str, partition: int | None, key, value, headers,
               timestamp_ms: int, now_ms: int) -> tuple[ProducerBatch, int] | None:
        """Add one record; returns ``(batch, index in batch)``, or None when the caller must
        wait first: the topic's metadata is unknown (it is wanted now) or the buffer is full.

        Raises TypeError for a key/value that is not bytes-like, ValueError for a partition
        out of range, MessageSizeTooLargeError for a record above max_request_size. This is
        the per-record hot path: keep it flat."""
        accumulator = self.accumulator
        leaders = self.cluster.leaders.get(topic)
        if leaders is None or accumulator.buffered_bytes >= self._buffer_memory:
            if leaders is None:
                self.cluster.want((topic,))
            return None
        if type(value) is bytes:
            size = RECORD_OVERHEAD + len(value)
        else:
            check_payload(value, "value")
            size = RECORD_OVERHEAD + (len(value) if value is not None else 0)
        if key is not None:
            if type(key) is not bytes:
                check_payload(key, "key")
            size += len(key)
        if headers:
            size += headers_size(headers)
        if size > self._max_request_size:
            raise MessageSizeTooLargeError(
                ErrorCode.MESSAGE_TOO_LARGE, f"a record of {size} bytes is larger than "
                f"max_request_size={self._max_request_size}", topic=topic)
        if partition is None:
            if key is None:
                return accumulator.append_sticky(topic, len(leaders), timestamp_ms, value,
                                                 headers, size, now_ms)
            partition = self.partitioner.for_key(topic, key, len(leaders))
        elif not 0 <= partition < len(leaders):
            raise ValueError(f"partition {partition} of {topic} does not exist "
                             f"(it has {len(leaders)})")
        return accumulator.append(topic, partition, timestamp_ms, key, value, headers, size,
                                  now_ms)

    def append_many(self, topic: str, partition: int | None, key, values, headers,
                    timestamp_ms: int, now_ms: int
                    ) -> list[tuple[ProducerBatch, int, int]] | None:
        """Add records sharing key, headers and timestamp to one partition (send_batch):
        ``(batch, first index, count)`` per batch they landed in; None as for append. A
        keyless list goes to the sticky partition (all of it: one partition per call)."""
        size = bytes_total(values)
        if size is None:
            for value in values:
                check_payload(value, "value")
            size = values_size(values)
        check_payload(key, "key")
        count = self.cluster.partition_count(topic)
        if count is None or self.memory_full:
            self.cluster.want((topic,))
            return None
        if partition is None:
            partition = (self.accumulator.sticky_partition(topic, count, size)
                         if key is None else self.partitioner.for_key(topic, key, count))
        elif not 0 <= partition < count:
            raise ValueError(f"partition {partition} of {topic} does not exist")
        return self.accumulator.append_many(topic, partition, timestamp_ms, key, values,
                                            headers, now_ms, size)

    def begin_flush(self) -> list[ProducerBatch]:
        """Seal every batch now; returns the batches a flush must wait for."""
        self.accumulator.seal_all()
        return list(self.accumulator.incomplete)

    def abort(self, error: KlogError | None = None, *, in_flight: bool = False) -> None:
        """Fail every batch not yet sent, and with ``in_flight`` also those awaiting an
        answer (close without waiting)."""
        error = error or ClosedError("the producer was closed before the record was sent")
        for batch in list(self.accumulator.abandon_all()):
            self._complete(batch, error)
        if in_flight:
            for batches in self.sequences.in_flight.values():
                for batch in batches:
                    self._complete(batch, error)
                batches.clear()

    # transactions (the user's side; `klog.producer.transactions` holds the state) ---------

    def _txn(self, what: str) -> TransactionManager:
        if self.transactions is None:
            raise TransactionStateError(f"{what} needs a producer with a transactional_id")
        return self.transactions

    def init_transactions(self):
        """A future resolved once the producer id and epoch are the transactional id's
        (earlier producers with that id are fenced)."""
        return self._txn("init_transactions()").init()

    def begin_transaction(self) -> None:
        self._txn("begin_transaction()").begin()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata):
        """A future resolved once the offsets are part of the transaction."""
        txn = self._txn("send_offsets_to_transaction()")
        if isinstance(group_metadata, str):  # Kafka's older form: the group id alone
            group_metadata = ConsumerGroupMetadata(group_metadata)
        if not isinstance(group_metadata, ConsumerGroupMetadata):
            raise TypeError("group_metadata must be consumer.group_metadata() (a "
                            f"ConsumerGroupMetadata) or a group id, not {group_metadata!r}")
        wanted = {}
        for tp, value in offsets.items():
            if type(value) is int:
                value = OffsetAndMetadata(value)
            elif not isinstance(value, OffsetAndMetadata):
                value = OffsetAndMetadata(*value)
            if type(value.offset) is not int or value.offset < 0:
                raise ValueError(f"offsets must be integers >= 0, not {value.offset!r}")
            wanted[(tp[0], tp[1])] = (value.offset, value.leader_epoch, value.metadata)
        return txn.send_offsets(wanted, group_metadata)

    def commit_transaction(self):
        """Seal every batch (a commit flushes), then a future resolved once EndTxn is."""
        txn = self._txn("commit_transaction()")
        future = txn.commit()
        self.accumulator.seal_all()
        return future

    def abort_transaction(self):
        """A future resolved once the abort is done (None: nothing to abort). Batches not yet
        sent fail with TransactionAbortableError."""
        return self._txn("abort_transaction()").abort()

    def _drop_unsent(self) -> None:
        txn = self.transactions
        if txn.state == FATAL_ERROR:
            error = txn.error
        elif txn.state == ABORTABLE_ERROR:
            error = TransactionAbortableError(
                f"the transaction cannot commit ({txn.error}): abort_transaction() and retry",
                txn.error)
        else:
            error = TransactionAbortableError("the transaction was aborted before the record "
                                              "was sent")
        for batch in list(self.accumulator.abandon_all()):
            txn.unsent_dropped(batch)
            self._fail(batch, error)

    # the sender's side --------------------------------------------------------------------

    def take_completed(self) -> list[tuple[ProducerBatch, Any]]:
        done, self._completed = self._completed, []
        return done

    def poll(self, now_ms: int) -> list[Outgoing]:
        out: list[Outgoing] = []
        due = self.cluster.refresh_due_ms(now_ms)
        if due is not None and due <= now_ms and self.cluster.wanted:
            out.append(Outgoing(None, metadata, self.cluster.build_request(now_ms)))
        txn = self.transactions
        if txn is not None:
            return self._poll_transactional(txn, out, now_ms)
        if self.sequences.needs_producer_id(now_ms):
            self.sequences.requesting = True
            out.append(Outgoing(None, init_producer_id, init_producer_id.Request(
                transactional_id=None, transaction_timeout_ms=60_000)))
        self._node_in_flight[None] += len(out)
        self._linger_due = self.accumulator.seal_lingering(now_ms)
        if self.accumulator.sealed_count:
            self._expire(now_ms)
            if self.sequences.has_producer_id:
                out.extend(drain(self.accumulator, self.cluster, self.sequences,
                                 self._node_in_flight, self._node_retry_at, self.config,
                                 now_ms))
        return out

    def _poll_transactional(self, txn: TransactionManager, out: list[Outgoing],
                            now_ms: int) -> list[Outgoing]:
        """poll for a transactional producer: coordinator requests first, then the batches
        of the partitions already added to the transaction."""
        accumulator = self.accumulator
        if txn.drops_unsent:
            self._drop_unsent()
        self._linger_due = accumulator.seal_lingering(now_ms)
        if accumulator.sealed_count:
            self._expire(now_ms)
        out.extend(txn.poll(now_ms, [key for key, queue in accumulator.queues.items() if queue],
                            not accumulator.incomplete))
        self._node_in_flight[None] += len(out)
        if (accumulator.sealed_count and self.sequences.has_producer_id
                and txn.state in (IN_TRANSACTION, COMMITTING)):
            out.extend(drain(accumulator, self.cluster, self.sequences, self._node_in_flight,
                             self._node_retry_at, self.config, now_ms, txn.added))
        return out

    def next_poll_ms(self, now_ms: int) -> int:
        """When poll will have work without anything else happening (linger, backoff,
        metadata age); the I/O layer also polls after every answer and every append that
        opens or seals a batch."""
        candidates = [now_ms + IDLE_POLL_MS]
        if self._linger_due is not None:
            candidates.append(self._linger_due)
        due = self.cluster.refresh_due_ms(now_ms)
        if due is not None and self.cluster.wanted:
            candidates.append(due)
        sequences = self.sequences
        if self.transactions is not None:
            txn_due = self.transactions.next_poll_ms(now_ms)
            if txn_due is not None:
                candidates.append(txn_due)
        elif sequences.enabled and sequences.producer_id < 0 and not sequences.requesting:
            candidates.append(sequences.retry_at_ms)
        for queue in self.accumulator.queues.values():
            if queue and queue[0].retry_at_ms > now_ms:
                candidates.append(queue[0].retry_at_ms)
        candidates.extend(t for t in self._node_retry_at.values() if t > now_ms)
        return max(now_ms, min(candidates))

    def _expire(self, now_ms: int) -> None:
        for batch in self.accumulator.expired(now_ms):
            error = KafkaTimeoutError(
                f"{batch.topic}[{batch.partition}]: {batch.count} record(s) not "
                f"acknowledged within delivery_timeout_ms={self.config.delivery_timeout_ms}")
            if self.transactions is not None:
                self.transactions.batch_failed(batch, error)
            self._fail(batch, error)

    # answers ------------------------------------------------------------------------------

    def _answered(self, request: Outgoing) -> None:
        if request.expect_response:
            key = None if request.api is not produce else request.node
            self._node_in_flight[key] -= 1

    def on_response(self, request: Outgoing, response, now_ms: int) -> None:
        self._answered(request)
        if request.api is metadata:
            self.cluster.update(response, now_ms)
        elif self.transactions is not None and request.api is not produce:
            self.transactions.on_response(request, response, now_ms)
        elif request.api is init_producer_id:
            if response.error_code == ErrorCode.NONE:
                self.sequences.set_producer_id(response.producer_id, response.producer_epoch)
            else:
                self.sequences.producer_id_failed(now_ms + self.config.retry_backoff_ms)
        elif response is None:  # acks=0: written is all we will ever know
            for batch in request.context:
                self.sequences.answered(batch)
                self._succeed(batch, (-1, -1, -1))
        else:
            self._on_produce(request, response, now_ms)

    def on_failure(self, request: Outgoing, error: KlogError, now_ms: int) -> None:
        """The request was lost (connection closed, timed out, could not connect)."""
        self._answered(request)
        if request.node is not None:
            self._node_retry_at[request.node] = now_ms + self.config.retry_backoff_ms
        self.cluster.mark_stale()
        if request.api is metadata:
            self.cluster.failed(now_ms, str(error))
        elif self.transactions is not None and request.api is not produce:
            self.transactions.on_failure(request, error, now_ms)
        elif request.api is init_producer_id:
            self.sequences.producer_id_failed(now_ms + self.config.retry_backoff_ms)
        else:
            for batch in request.context:
                self.sequences.answered(batch)
                self._retry_or_fail(batch, error, True, now_ms)

    def _on_produce(self, request: Outgoing, response, now_ms: int) -> None:
        by_key = {batch.key: batch for batch in request.context}
        broker = self.cluster.describe(request.node)
        endpoints = {n.node_id: (n.host, n.port) for n in response.node_endpoints}
        for topic in response.responses:
            for part in topic.partition_responses:
                batch = by_key.pop((topic.name, part.index), None)
                if batch is None:
                    continue
                self.sequences.answered(batch)
                code = ErrorCode(part.error_code)
                if code in _SUCCESS:
                    self._succeed(batch, (part.base_offset, part.log_append_time_ms,
                                          part.log_start_offset))
                    continue
                hinted = _take_hint(self.cluster, batch, part, endpoints)
                if code in _STALE_METADATA and not hinted:
                    self.cluster.mark_stale()
                retriable = code.retriable or (
                    code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                    and self.sequences.earlier_unacked(batch))
                error = error_for(code, _explained(code, part.error_message, batch,
                                                   self.config.batch_size),
                                  topic=batch.topic, partition=batch.partition, broker=broker)
                self._retry_or_fail(batch, error, retriable, now_ms)
                if hinted and batch.retry_at_ms > now_ms:
                    batch.retry_at_ms = now_ms  # to the new leader at once, as KIP-951 asks
        for batch in by_key.values():  # the broker skipped it: treat as lost
            self.sequences.answered(batch)
            self._retry_or_fail(batch, error_for(ErrorCode.NETWORK_EXCEPTION,
                                                 "no answer for the partition", broker=broker,
                                                 topic=batch.topic, partition=batch.partition),
                                True, now_ms)

    def _retry_or_fail(self, batch: ProducerBatch, error: KlogError, retriable: bool,
                       now_ms: int) -> None:
        if retriable and batch.attempts <= self.config.retries and now_ms < batch.deadline_ms:
            log.info("retrying a batch for %s-%d (attempt %d): %s", batch.topic,
                     batch.partition, batch.attempts + 1, error)
            self.retries += 1
            batch.retry_at_ms = now_ms + self.config.retry_backoff_ms
            self.accumulator.requeue(batch)
        else:
            log.warning("giving up on a batch of %s-%d after %d attempt(s): %s", batch.topic,
                        batch.partition, batch.attempts, error)
            if self.transactions is not None:
                self.transactions.batch_failed(batch, error)
            else:
                self.sequences.broken(batch)
            self._fail(batch, error)

    def _succeed(self, batch: ProducerBatch, value: tuple[int, int, int]) -> None:
        self.sequences.finished(batch)
        self._complete(batch, value)

    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        self.sequences.finished(batch)
        self._complete(batch, error)

    def _complete(self, batch: ProducerBatch, value: Any) -> None:
        if not batch.done:
            self.accumulator.release(batch)
            self._completed.append((batch, value))
