"""klog.Consumer: the blocking consumer, a thin I/O layer over `ConsumerProtocol`.

The caller's ``poll`` (or iteration) drives the protocol object through `klog.wire`.
Fetches are pipelined all the same: when a Fetch answer arrives its partition's next Fetch is
sent *before* its records are decoded and returned, so the broker prepares the next answer
while the application works. The one background thread is a group member's heartbeat
(`klog.consumer.heartbeat_thread`), which keeps the group session alive while the
application works between polls; it never touches the consumer's state.

Rebalance listeners and commit callbacks run inside ``poll`` and iteration, on the caller's
thread, never inside another call.

Example::

    consumer = klog.Consumer(bootstrap_servers="127.0.0.1:9092", group_id="loaders",
                             auto_offset_reset="earliest")
    consumer.subscribe(["clicks"])
    for record in consumer:            # blocks for new records; never ends by itself
        print(record.offset, record.key, record.value)
"""

from __future__ import annotations

import contextlib
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
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.consumer.cursor import Cursor
from klog.consumer.group import Assign, CommitDone, Revoke
from klog.consumer.heartbeat_thread import POLL_TIMEOUT, HeartbeatThread
from klog.errors import KafkaTimeoutError, KlogError
from klog.outgoing import deliver
from klog.protocol.records_columns import RecordColumns
from klog.tls import ssl_context_of
from klog.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
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
    ``consumer_timeout_ms`` (iteration stops after this long without records); for groups
    ``group_id``, ``group_instance_id`` (static membership), ``session_timeout_ms``,
    ``heartbeat_interval_ms``, ``max_poll_interval_ms``, ``partition_assignment_strategy``
    (["range", "roundrobin"], or ["cooperative-sticky"]), ``enable_auto_commit``,
    ``auto_commit_interval_ms``.
    """

    def __init__(self, **options: Any):
        super().__init__("Consumer", options)
        self._network = Network(self.config.bootstrap_servers, client_id=self.config.client_id,
                                request_timeout_ms=self.config.request_timeout_ms,
                                address_of=self._core.address_of,
                                ssl_context=ssl_context_of(self.config),
                                security=self.config.security)
        self._stream: Iterator[ConsumerRecord] | None = None
        self._keeper: HeartbeatThread | None = None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Leave the group (auto-commit first, then on_revoke; a static member stays until
        its session times out), close the connections. The consumer cannot be used
        afterwards. Idempotent."""
        if self._closed:
            return
        try:
            if self._core.group is not None:
                self._give_up()
        finally:
            self._closed = True
            if self._keeper is not None:
                self._keeper.close()
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
        (OffsetOutOfRangeError with auto_offset_reset="none", KafkaError, ...).

        A group member's poll also joins and rejoins the group, runs the rebalance listeners
        and commit callbacks, and auto-commits; poll at least every ``max_poll_interval_ms``
        or the member leaves the group (its partitions go to others; it rejoins, and
        ``on_lost`` runs, at the next poll). Iteration counts as polling."""
        limit = max_records or self.config.max_poll_records
        return self._poll_for(lambda core: core.take_records(limit), timeout_ms)

    def poll_columns(self, timeout_ms: int = 0) -> dict[TopicPartition, RecordColumns]:
        """As :meth:`poll`, but the records come as columns, one `RecordColumns` per
        partition (Arrow-ready buffers, no Python object per record; see
        `klog.protocol.records_columns`), with every buffered fetch in it: no
        ``max_records`` limit and no deserializers (keys and values are the raw bytes).
        For readers that build arrays (the PySpark source); errors as :meth:`poll`'s."""
        return self._poll_for(lambda core: core.take_columns(), timeout_ms)

    def _poll_for(self, take: Callable[[ConsumerProtocol], dict], timeout_ms: int) -> dict:
        """Drive the network until ``take(core)`` gives something or ``timeout_ms`` passed."""
        self._check_open()
        deadline = time.monotonic() + timeout_ms / 1000
        self._finish_cursor()
        self._polled(_now_ms())
        core = self._core
        pumped = False
        while True:
            self._run_events()
            taken = take(core)
            if taken:
                self._pump(0)  # pipelining: the next fetch goes out before we return
                return taken
            core.raise_pending()
            remaining = deadline - time.monotonic()
            if remaining <= 0 and pumped:
                return {}
            self._pump(max(remaining, 0))  # poll(0) too drives the network once
            pumped = True

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
                self._cursor = None  # the chunk handed out is done: free it before the next
                chunk = self._next_chunk(self.config.consumer_timeout_ms)
                if chunk is None:
                    return
                self._cursor = Cursor(*chunk)
                del chunk
                yield self._cursor.iterator
        finally:
            self._stream = self._cursor = None

    def _next_chunk(self, timeout_ms: int | None):
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        self._polled(_now_ms())
        core = self._core
        while True:
            self._run_events()
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
        self._sync_keeper(now_ms)
        for request in core.poll(now_ms):
            network.send(request)
        wait_s = min(timeout_s, (core.next_poll_ms(now_ms) - now_ms) / 1000)
        events = network.poll(wait_s)
        if events:
            now_ms = _now_ms()
            deliver(core, events, now_ms)
            for request in core.poll(now_ms):
                network.send(request)
        self._sync_keeper(now_ms)

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

    # groups -------------------------------------------------------------------------------

    def commit(self, offsets: dict | None = None, asynchronous: bool = False,
               callback: Callable | None = None, timeout_ms: int | None = None) -> None:
        """Commit offsets for the group: by default the position of every assigned partition
        (the next record poll would return), else ``offsets``: ``{TopicPartition: offset or
        OffsetAndMetadata}``. Synchronous by default: retries while the coordinator moves,
        raises CommitFailedError when the group rebalanced (poll, then commit again),
        KafkaTimeoutError after ``timeout_ms`` (default request_timeout_ms). With
        ``asynchronous=True`` it returns at once; ``callback(offsets, error or None)`` runs
        in a later poll."""
        self._check_open()
        group = self._group("commit()")
        wanted = self._offsets_to_commit(offsets)
        if asynchronous:
            group.commit(wanted, retry=False, callback=callback)
            self._pump(0)
            return
        pending = group.commit(wanted, retry=True)
        self._wait_or_cancel(pending, timeout_ms, "OffsetCommit")
        if pending.error is not None:
            raise pending.error

    def commit_async(self, offsets: dict | None = None,
                     callback: Callable | None = None) -> None:
        """``commit(offsets, asynchronous=True, callback=callback)``."""
        self.commit(offsets, asynchronous=True, callback=callback)

    def committed(self, partitions: Iterable[TopicPartition] | TopicPartition,
                  timeout_ms: int | None = None) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None: nothing committed)."""
        self._check_open()
        group = self._group("committed()")
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        lookup = group.committed(partitions)
        self._wait_or_cancel(lookup, timeout_ms, "OffsetFetch")
        if lookup.error is not None:
            raise lookup.error
        return {tp: None if found is None else found.offset
                for tp, found in lookup.results.items()}

    def unsubscribe(self) -> None:
        """Leave the group (committing and revoking first, as close does) and drop every
        partition, subscribed or assign()ed."""
        self._check_open()
        if self._core.group is not None:
            self._give_up()
        self._cut_cursor(lambda tp: True)
        self._core.assign([])

    def _wait_or_cancel(self, item, timeout_ms: int | None, what: str) -> None:
        try:
            self._wait_for(lambda: item.done, timeout_ms, what)
        except KafkaTimeoutError:
            self._core.group.commits.cancel(item)  # type: ignore[union-attr]
            raise

    def _commit_quietly(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """A synchronous commit whose failure must not stop a rebalance or a close."""
        if offsets:
            with contextlib.suppress(KlogError):
                self.commit(offsets)

    def _run_events(self) -> None:
        """Run what the group asked of the application: listeners, commit callbacks."""
        group = self._core.group
        if group is None or self._in_listener:
            return
        self._in_listener = True
        try:
            while (event := group.next_event()) is not None:
                self._handle(event)
        finally:
            self._in_listener = False

    def _handle(self, event) -> None:
        if isinstance(event, CommitDone):
            event.commit.callback(event.commit.offsets, event.commit.error)
        elif isinstance(event, Assign):
            if self._listener.on_assign is not None:
                self._listener.on_assign(set(event.partitions))
        else:
            self._revoke(event)

    def _revoke(self, event: Revoke) -> None:
        """Commit (auto-commit, unless lost), call on_revoke/on_lost, then let go."""
        callback = self._listener_for(event)
        try:
            if not event.lost and self.config.auto_commit:
                self._commit_quietly(self._positions(event.partitions))
            if callback is not None and event.partitions:
                callback(set(event.partitions))
        finally:
            self._cut_cursor(lambda tp: tp in event.partitions)
            self._core.group.revoked(event)  # type: ignore[union-attr]

    def _give_up(self) -> None:
        """Close/unsubscribe: commit, revoke, leave (each bounded by request_timeout_ms)."""
        group = self._core.group
        membership = group.membership  # type: ignore[union-attr]
        if not group.subscribed.active:  # type: ignore[union-attr]
            if self.config.auto_commit:
                self._commit_quietly(self._positions())
            return
        owned, lost = membership.owned, membership.generation < 0
        if owned:
            self._in_listener = True
            try:
                self._revoke(Revoke(owned, lost=lost))
            finally:
                self._in_listener = False
        group.events.clear()  # type: ignore[union-attr]
        leave = group.unsubscribe()  # type: ignore[union-attr]
        if leave is not None:
            with contextlib.suppress(KlogError):
                self._wait_for(lambda: membership.leaving is None, None, "LeaveGroup")

    def _sync_keeper(self, now_ms: int) -> None:
        """Trade news with the heartbeat thread (started once we are a group member)."""
        group = self._core.group
        if group is None:
            return
        membership = group.membership
        keeper = self._keeper
        if keeper is not None:
            for code, generation, member_id in keeper.take_reports():
                if code == POLL_TIMEOUT:
                    membership.reset_generation("the heartbeat thread left the group: no poll "
                                                "within max_poll_interval_ms", generation)
                else:
                    membership.on_background_heartbeat(code, generation, member_id, now_ms)
        target = membership.heartbeat_target()
        if target is not None and keeper is None and not self._closed:
            config = self.config
            keeper = self._keeper = HeartbeatThread(
                client_id=config.client_id, heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_poll_interval_ms=config.max_poll_interval_ms,
                request_timeout_ms=config.request_timeout_ms,
                ssl_context=self._network.ssl_context, security=config.security)
        if keeper is not None:
            keeper.publish(target, membership.last_app_poll_ms or now_ms,
                           membership.last_heartbeat_ms)

    def _polled(self, now_ms: int) -> None:
        self._sync_keeper(now_ms)  # a poll-timeout leave by the thread comes first
        super()._polled(now_ms)
