"""What the blocking and asyncio consumers share: options, assignment, subscription, seeks,
pausing, the iteration cursor, and the group bookkeeping that does not wait (which offsets a
commit carries, when auto-commit is due, which listener an event calls). None of it waits or
does I/O; the flavours add poll, iteration, commits and the lookups, which do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.consumer.cursor import Cursor
from klog.consumer.group import Assign, GroupProtocol, Revoke
from klog.consumer.positions import EARLIEST, LATEST
from klog.errors import ClosedError, KlogError, error_for
from klog.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)


class Listener(NamedTuple):
    """The rebalance listener given to ``subscribe``."""

    on_assign: Callable | None = None
    on_revoke: Callable | None = None
    on_lost: Callable | None = None  # None: on_revoke (Java's default)


class ConsumerBase:
    def __init__(self, owner: str, options: dict[str, Any]):
        self.config: ConsumerConfig = build(ConsumerConfig, owner, options)
        self._core = ConsumerProtocol(self.config)
        self._closed = False
        self._cursor: Cursor | None = None  # the chunk being iterated
        self._network: Any = None  # the flavour's network
        self._listener = Listener()
        self._in_listener = False  # listeners run one at a time, never inside each other
        self._next_auto_commit_ms = 0

    # assignment and positions -------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (replacing any earlier assignment). Positions start
        per ``auto_offset_reset`` unless ``seek`` sets them."""
        self._check_open()
        group = self._core.group
        if group is not None and group.subscribed.active:
            raise ValueError("assign() and subscribe() exclude each other: unsubscribe() first")
        partitions = [TopicPartition(*tp) for tp in partitions]
        self._cut_cursor(lambda tp: tp not in partitions)
        self._core.assign(partitions)

    def subscribe(self, topics: str | Iterable[str] | None = None,
                  pattern: str | re.Pattern[str] | None = None, *,
                  on_assign: Callable | None = None, on_revoke: Callable | None = None,
                  on_lost: Callable | None = None) -> None:
        """Join the group ``group_id`` and read the partitions it hands this consumer, out of
        ``topics`` (a name or names) or the topics whose whole name matches ``pattern`` (a
        regex; topics created later join at the next metadata refresh, every
        ``metadata_max_age_ms``). Replaces an earlier subscription; the group is joined by
        poll() and iteration, which also run the listeners, with a set of TopicPartitions:

        - ``on_revoke(partitions)`` before partitions are given up (after auto-commit has
          committed their positions; commit there yourself otherwise);
        - ``on_assign(partitions)`` once partitions are assigned: the whole new assignment
          with the eager protocol ("range", "roundrobin"), only the added ones with
          "cooperative-sticky" (called after every rebalance, maybe with an empty set);
        - ``on_lost(partitions)`` (default: on_revoke) when the membership was lost (no poll
          within max_poll_interval_ms, session expired): their commits would be refused.

        Raises ValueError without a group_id, with both or neither of topics and pattern, or
        while partitions are assign()ed."""
        self._check_open()
        group = self._group("subscribe()")
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe() takes topics or a pattern (one of them)")
        if not group.subscribed.active and self._core.assignment.states:
            raise ValueError("assign() and subscribe() exclude each other: assign([]) first")
        for name, value in (("on_assign", on_assign), ("on_revoke", on_revoke),
                            ("on_lost", on_lost)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable, not {value!r}")
        if pattern is not None:
            group.subscribe(pattern=re.compile(pattern) if isinstance(pattern, str) else pattern)
        else:
            names = [topics] if isinstance(topics, str) else list(topics)  # type: ignore[arg-type]
            if not all(isinstance(t, str) and t for t in names):
                raise ValueError(f"topics must be non-empty strings, not {names!r}")
            group.subscribe(topics=names)
        self._listener = Listener(on_assign, on_revoke, on_lost)

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matches now)."""
        group = self._core.group
        return set(group.subscribed.topics) if group and group.subscribed.active else set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._core.assignment.states)

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """The next poll returns records of ``partition`` from ``offset`` on."""
        tp = TopicPartition(*partition)
        self._core.seek(tp, offset)
        self._cut_cursor(lambda other: other == tp)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the earliest offset of these partitions (all assigned ones if none)."""
        self._reset(partitions, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move to the high watermark: only records appended from now on are read."""
        self._reset(partitions, LATEST)

    def _reset(self, partitions, where: int) -> None:
        chosen = [TopicPartition(*tp) for tp in partitions] or list(self.assignment())
        self._core.reset(chosen, where)
        self._cut_cursor(lambda tp: tp in chosen)

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The high watermark the last fetch of ``partition`` reported (None before one)."""
        mark = self._core.assignment.state(TopicPartition(*partition)).high_watermark
        return None if mark < 0 else mark

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions until resume (records already fetched still come)."""
        for tp in partitions:
            self._core.assignment.state(TopicPartition(*tp)).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._core.assignment.state(TopicPartition(*tp)).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._core.assignment.states.items() if s.paused}

    def _cut_cursor(self, affected: Callable[[TopicPartition], bool]) -> None:
        """A seek/assign while iterating: drop the rest of the current chunk if it moved."""
        if self._cursor is not None:
            self._cursor.cut(affected)

    def _finish_cursor(self) -> None:
        """poll() after iteration: the chunk being iterated is abandoned at its position."""
        if self._cursor is not None and (resume := self._cursor.abandon()) is not None:
            self._core.seek(*resume)

    # groups: what does not wait ----------------------------------------------------------

    def _group(self, what: str) -> GroupProtocol:
        group = self._core.group
        if group is None:
            raise ValueError(f"{what} needs a consumer group: give the consumer a group_id")
        return group

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group id, generation, member id and group instance id, for a transactional
        producer's ``send_offsets_to_transaction`` (Kafka's ConsumerGroupMetadata): the
        coordinator refuses the offsets of a member of an older generation (a zombie).
        Outside a generation (before the first assignment, or with assign()) the generation
        is -1 and the member id empty, as Kafka's."""
        group = self._group("group_metadata()")
        membership = group.membership
        return ConsumerGroupMetadata(self.config.group_id, membership.generation,
                                     membership.member_id, self.config.group_instance_id)

    def _positions(self, partitions: Iterable[TopicPartition] | None = None
                   ) -> dict[TopicPartition, OffsetAndMetadata]:
        """What a default commit carries: the position of each assigned partition that has
        one (inside a chunk being iterated, the next record's offset)."""
        states = self._core.assignment.states
        out = {}
        for tp in states if partitions is None else partitions:
            state = states.get(tp)
            if state is not None:
                offset = self._cursor_position(tp)
                offset = state.position if offset is None else offset
                if offset is not None:
                    out[tp] = OffsetAndMetadata(offset)
        return out

    def _offsets_to_commit(self, offsets) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return self._positions()
        out = {}
        for tp, value in offsets.items():
            if type(value) is int:
                value = OffsetAndMetadata(value)
            elif not isinstance(value, OffsetAndMetadata):
                value = OffsetAndMetadata(*value)
            if type(value.offset) is not int or value.offset < 0:
                raise ValueError(f"commit offsets must be integers >= 0, not {value.offset!r}")
            out[TopicPartition(*tp)] = value
        return out

    def _auto_commit(self, now_ms: int) -> None:
        """Every auto_commit_interval_ms (checked at each poll), an asynchronous commit of the
        positions that moved since this consumer last committed them."""
        group = self._core.group
        if group is None or not self.config.auto_commit or now_ms < self._next_auto_commit_ms:
            return
        first = self._next_auto_commit_ms == 0  # the clock starts at the first poll
        self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
        if first:
            return
        if isinstance(group.membership.identity(), KlogError):
            return  # rebalancing: the positions are committed before partitions move
        committed = group.commits.committed
        moved = {tp: meta for tp, meta in self._positions().items()
                 if committed.get(tp) != meta.offset}
        if moved:
            group.commit(moved, retry=False)

    def _polled(self, now_ms: int) -> None:
        """An application poll (or the next chunk of an iteration): the max_poll_interval_ms
        clock restarts; auto-commit if due."""
        group = self._core.group
        if group is not None:
            group.app_polled(now_ms)
            self._auto_commit(now_ms)

    def _listener_for(self, event) -> Callable | None:
        listener = self._listener
        if isinstance(event, Assign):
            return listener.on_assign
        if isinstance(event, Revoke) and event.lost and listener.on_lost is not None:
            return listener.on_lost
        return listener.on_revoke

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the consumer is closed")

    def statistics(self) -> dict[str, int]:
        """Counters: partitions assigned, fetches buffered, requests in flight."""
        return {"assigned": len(self._core.assignment.states),
                "buffered_fetches": sum(s.buffered for s in self._core.assignment.states.values()),
                "in_flight": self._network.in_flight()}

    def _cursor_position(self, tp: TopicPartition) -> int | None:
        return None if self._cursor is None else self._cursor.next_offset(tp)

    def _metadata_answer(self, topic: str) -> set[int]:
        cluster = self._core.cluster
        if topic not in cluster.leaders:
            raise error_for(cluster.errors[topic], topic=topic)
        return set(range(len(cluster.leaders[topic])))

    def _want_metadata(self, topic: str):
        """Ask for ``topic``'s metadata; returns the predicate "it has arrived"."""
        cluster = self._core.cluster
        cluster.want((topic,))
        cluster.mark_stale()
        return lambda: topic in cluster.leaders or topic in cluster.errors


def check_timestamps(timestamps: dict) -> None:
    for ts in timestamps.values():
        if type(ts) is not int or ts < 0:
            raise ValueError(f"timestamps must be integers >= 0 (ms), not {ts!r}")


def as_offsets_and_timestamps(found) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    return {tp: None if hit is None else OffsetAndTimestamp(*hit) for tp, hit in found.items()}


def as_offsets(found) -> dict[TopicPartition, int]:
    return {tp: hit[0] for tp, hit in found.items() if hit is not None}


