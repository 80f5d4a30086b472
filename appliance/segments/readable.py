"""What a Fetch may read from a partition, wherever the log is: the owner's `PartitionLog`, or
another worker's view of it (`RemoteLog` in `appliance.workers.shared_state`, built on
`PartitionReader`). Declared once so the two cannot drift apart; a test checks both."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .log_reads import ReadSlice
from .txn_index import AbortedTxn


@runtime_checkable
class ReadableLog(Protocol):
    @property
    def high_watermark(self) -> int:
        """Consumers read below it, never at or past it."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still kept (retention moves it)."""

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below it (KIP-98): the first offset of the earliest
        open transaction, else the high watermark."""

    def read(self, offset: int, max_bytes: int, *, committed: bool = False) -> ReadSlice:
        """Whole batches from `offset`, at most `max_bytes` unless the first batch is larger:
        `(fd, position, length)` for sendfile; below the last stable offset when `committed`.
        Raises OffsetOutOfRangeError, StorageError."""

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions that overlap [fetch_offset, upper_offset) (.txnindex)."""
