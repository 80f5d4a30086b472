"""Where the application is inside the chunk of records it is iterating. Pure.

Iteration hands out records one at a time from a chunk (one fetch's records); the chunk's
partition position has already moved past all of them in the protocol object. The cursor
keeps the truth for that partition: the next offset is the next record's in the chunk. It
reads that from the chunk's own list iterator (``__length_hint__`` is what is left), so
iteration pays nothing per record for it. A seek or reassignment cuts the chunk's rest (the
list is truncated in place, which ends the iterator at once). Shared by the blocking and
asyncio consumers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from klog.types import ConsumerRecord, TopicPartition


class Cursor:
    __slots__ = ("tp", "records", "iterator")

    def __init__(self, tp: TopicPartition, records: list[ConsumerRecord]):
        self.tp = tp
        self.records = records
        self.iterator: Iterator[ConsumerRecord] = iter(records)

    def _next_index(self) -> int:
        return len(self.records) - self.iterator.__length_hint__()  # type: ignore[attr-defined]

    def next_offset(self, tp: TopicPartition) -> int | None:
        """The offset of the next record of ``tp`` not yet handed out, if the chunk has one."""
        if tp == self.tp:
            index = self._next_index()
            if index < len(self.records):
                return self.records[index].offset
        return None

    def cut(self, affected: Callable[[TopicPartition], bool]) -> None:
        if affected(self.tp):
            del self.records[self._next_index():]

    def abandon(self) -> tuple[TopicPartition, int] | None:
        """Stop iterating this chunk: where its partition must resume, if records remain."""
        rest = self.next_offset(self.tp)
        del self.records[self._next_index():]
        return None if rest is None else (self.tp, rest)
