"""What the blocking and asyncio consumers share: options, assignment, seeks, pausing and
the iteration cursor. None of it waits or does I/O; the flavours add poll, iteration and the
lookups, which do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from klog.config import ConsumerConfig, build
from klog.consumer.cursor import Cursor
from klog.consumer.positions import EARLIEST, LATEST
from klog.consumer.protocol import ConsumerProtocol
from klog.errors import ClosedError, error_for
from klog.types import OffsetAndTimestamp, TopicPartition


class ConsumerBase:
    def __init__(self, owner: str, options: dict[str, Any]):
        self.config: ConsumerConfig = build(ConsumerConfig, owner, options)
        self._core = ConsumerProtocol(self.config)
        self._closed = False
        self._cursor: Cursor | None = None  # the chunk being iterated
        self._network: Any = None  # the flavour's network

    # assignment and positions -------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (replacing any earlier assignment). Positions start
        per ``auto_offset_reset`` unless ``seek`` sets them."""
        self._check_open()
        partitions = [TopicPartition(*tp) for tp in partitions]
        self._cut_cursor(lambda tp: tp not in partitions)
        self._core.assign(partitions)

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


