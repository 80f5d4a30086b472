"""Transactional offsets waiting for their transaction's marker (KIP-98's pending offsets).

A TxnOffsetCommit writes its offsets to the group's partition of ``__consumer_offsets`` in a
transactional batch of the producer, and they are held here, keyed by producer id, until the
producer's marker lands on that partition: COMMIT makes them the group's committed offsets,
ABORT drops them. OffsetFetch never answers them as committed (and ``require_stable`` asks
the caller to wait while a partition has some).

Which write wins, as Kafka's ``completePendingTxnOffsetCommit`` decides by log position: a
later write of the same key (a plain OffsetCommit, or another producer's TxnOffsetCommit)
supersedes a pending one, so a marker applies only what no later write replaced. The same
rule runs live and when a partition's log is replayed, in log order, so both agree.

Event loop only (the coordinator's); also used by a load replaying a log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # offsets_log imports this module
    from appliance.workers.groups.offsets_log import Committed

Key = tuple[str, int]  # (topic, partition)


class PendingOffsets:
    def __init__(self) -> None:
        # producer id -> group id -> (topic, partition) -> the offset it will commit
        self.by_producer: dict[int, dict[str, dict[Key, Committed]]] = {}
        self.epochs: dict[int, int] = {}  # producer id -> the epoch of its last write

    def __bool__(self) -> bool:
        return bool(self.by_producer)

    def add(self, producer_id: int, producer_epoch: int, group_id: str,
            offsets: dict[Key, Committed]) -> None:
        """A TxnOffsetCommit written: pending until the producer's marker."""
        self.supersede(group_id, offsets.keys(), but=producer_id)
        self.by_producer.setdefault(producer_id, {}).setdefault(group_id, {}).update(offsets)
        self.epochs[producer_id] = producer_epoch

    def supersede(self, group_id: str, keys: Iterable[Key], *, but: int | None = None) -> None:
        """A later write of ``keys`` for the group: other producers' pending writes of them
        will not be applied."""
        keys = set(keys)
        for producer_id in [p for p in self.by_producer if p != but]:
            groups = self.by_producer[producer_id]
            pending = groups.get(group_id)
            if pending is None:
                continue
            for key in keys & pending.keys():
                del pending[key]
            if not pending:
                del groups[group_id]
            if not groups:
                self._forget(producer_id)

    def complete(self, producer_id: int,
                 in_partition: Callable[[str], bool]) -> dict[str, dict[Key, Committed]]:
        """The producer's marker landed on a partition: remove and return its pending offsets
        of the groups that partition holds (``in_partition(group_id)``)."""
        groups = self.by_producer.get(producer_id)
        if not groups:
            return {}
        done = {g: offsets for g, offsets in groups.items() if in_partition(g)}
        for group_id in done:
            del groups[group_id]
        if not groups:
            self._forget(producer_id)
        return done

    def drop_groups(self, gone: Callable[[str], bool]) -> None:
        """Forget the pending offsets of the groups ``gone`` names (deleted, or unloaded)."""
        for producer_id in list(self.by_producer):
            groups = self.by_producer[producer_id]
            for group_id in [g for g in groups if gone(g)]:
                del groups[group_id]
            if not groups:
                self._forget(producer_id)

    def merge(self, other: PendingOffsets) -> None:
        """A loaded partition's pending offsets join the coordinator's (groups are disjoint)."""
        for producer_id, groups in other.by_producer.items():
            mine = self.by_producer.setdefault(producer_id, {})
            for group_id, offsets in groups.items():
                mine.setdefault(group_id, {}).update(offsets)
            self.epochs[producer_id] = other.epochs[producer_id]

    def keys_of(self, group_id: str) -> set[Key]:
        """The partitions of the group that some open transaction will commit."""
        return {key for groups in self.by_producer.values()
                for key in groups.get(group_id, ())}

    def of_groups(self, wanted: Callable[[str], bool]
                  ) -> Iterator[tuple[int, int, str, dict[Key, Committed]]]:
        """(producer id, epoch, group id, offsets) of the groups ``wanted`` names: what a
        snapshot restates as transactional batches."""
        for producer_id, groups in self.by_producer.items():
            for group_id, offsets in groups.items():
                if wanted(group_id) and offsets:
                    yield producer_id, self.epochs[producer_id], group_id, offsets

    def _forget(self, producer_id: int) -> None:
        self.by_producer.pop(producer_id, None)
        self.epochs.pop(producer_id, None)
