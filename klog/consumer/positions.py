"""Which partitions a consumer reads and where it stands in each. Pure.

Per assigned partition, two offsets (Kafka's SubscriptionState):

- ``position``: the offset of the next record the application will be given;
- ``fetch_offset``: the next offset to fetch. It runs ahead of ``position`` while fetched
  records wait in the consumer's buffer, which is what lets the next fetch be in flight while
  the application works through the previous one.

A partition without a position has a *reset* pending: ``EARLIEST``, ``LATEST`` or a timestamp,
resolved with ListOffsets; ``auto_offset_reset="none"`` leaves it without one, and poll raises
NoOffsetForPartitionError. A consumer with a group starts new partitions at ``COMMITTED``: the
group's committed offset is fetched first (OffsetFetch), and only a partition without one
falls back to the default reset. ``generation`` tells one life of a partition's position
from the next: answers to requests sent before a seek, a reset or a reassignment (a Fetch in
flight, a buffered fetch, a ListOffsets or OffsetFetch for the start position) carry an older
one and are dropped as stale. It is drawn from one counter for the whole assignment, never
per partition: a partition revoked and assigned again (every eager rebalance that keeps it)
gets a fresh state, whose generation must not repeat the old state's, or the old state's
Fetch answer, asked for past records that the revocation dropped unread, would be taken as
the new position's and those records skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

from klog.types import TopicPartition

EARLIEST, LATEST = -2, -1
COMMITTED = "committed"  # not a ListOffsets timestamp: looked up with OffsetFetch
RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}


class PartitionState:
    __slots__ = ("position", "fetch_offset", "reset", "high_watermark", "log_start_offset",
                 "paused", "fetching", "buffered", "generation", "fetch_epoch",
                 "leader_epoch", "validating")

    def __init__(self, reset: int | str | None, generation: int):
        self.position: int | None = None
        self.fetch_offset: int | None = None
        self.reset = reset
        self.high_watermark = -1
        self.log_start_offset = -1
        self.paused = False
        self.fetching = False  # a Fetch for this partition is in flight
        self.buffered = 0  # completed fetches waiting in the consumer
        self.generation = generation  # unique in the Assignment (see the module docstring)
        # KIP-320: the leader epoch of the batch before fetch_offset (-1: unknown, e.g. after
        # a seek), and the partition's leader epoch when we last fetched or validated there;
        # a newer leader epoch in the metadata means validating fetch_offset before fetching
        self.fetch_epoch = -1
        self.leader_epoch = -1
        self.validating = False

    @property
    def fetchable(self) -> bool:
        return (self.fetch_offset is not None and not self.paused and not self.fetching
                and self.buffered <= 1 and not self.validating)


class Assignment:
    def __init__(self, default_reset: int | None):
        self.default_reset = default_reset
        self.states: dict[TopicPartition, PartitionState] = {}
        self.generation = 0  # the last generation handed to a partition state

    def assign(self, partitions: Iterable[TopicPartition], reset: int | str | None = None
               ) -> None:
        """Replace the assignment; kept partitions keep their positions, new ones start at
        ``reset`` (default: the consumer's auto_offset_reset)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        start = self.default_reset if reset is None else reset
        self.states = {tp: self.states.get(tp) or PartitionState(start, self._next_generation())
                       for tp in wanted}

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.states.get(tp)
        if state is None:
            raise ValueError(f"{tp.topic}[{tp.partition}] is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if type(offset) is not int or offset < 0:
            raise ValueError(f"seek offset must be an integer >= 0, not {offset!r}")
        state = self.state(tp)
        self._moved(state)
        state.position = state.fetch_offset = offset
        state.reset = None

    def request_reset(self, tp: TopicPartition, reset: int | None) -> None:
        """Forget the position: it will be looked up (EARLIEST, LATEST or a timestamp)."""
        state = self.state(tp)
        self._moved(state)
        state.position = state.fetch_offset = None
        state.reset = reset

    def _next_generation(self) -> int:
        self.generation += 1
        return self.generation

    def _moved(self, state: PartitionState) -> None:
        state.generation = self._next_generation()
        state.buffered = 0
        state.fetching = False  # an answer to the fetch in flight will be dropped as stale
        state.fetch_epoch = -1  # a position set by hand or looked up: nothing to validate
        state.validating = False

    def resolved(self, tp: TopicPartition, offset: int) -> None:
        """A reset's answer arrived."""
        state = self.states.get(tp)
        if state is not None and state.position is None:
            state.position = state.fetch_offset = offset
            state.reset = None

    def needing_reset(self) -> list[tuple[TopicPartition, int]]:
        """Partitions waiting for a ListOffsets answer (EARLIEST, LATEST, a timestamp)."""
        return [(tp, s.reset) for tp, s in self.states.items()
                if s.position is None and s.reset is not None and s.reset != COMMITTED]

    def needing_committed(self) -> list[TopicPartition]:
        """Partitions waiting for their group's committed offset."""
        return [tp for tp, s in self.states.items() if s.position is None and
                s.reset == COMMITTED]

    def no_commit(self, tp: TopicPartition) -> None:
        """The group has no committed offset for ``tp``: fall back to the default reset."""
        state = self.states.get(tp)
        if state is not None and state.position is None and state.reset == COMMITTED:
            state.reset = self.default_reset

    def without_position(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a way to get one (reset "none")."""
        return [tp for tp, s in self.states.items() if s.position is None and s.reset is None]

    def topics(self) -> set[str]:
        return {tp.topic for tp in self.states}
