"""What the cleaner tracks of transactions while it rewrites a log (Kafka's
CleanedTransactionMetadata).

Kafka's rules, which this module owns:

- **Aborted data goes.** The aborted transactions (from the ``.txnindex`` files, oldest first)
  become "ongoing" once the cleaner reaches their first offset; a transactional batch of an
  ongoing aborted producer is dropped whole.
- **A marker stays while its transaction has data in the log.** A COMMIT marker whose
  transaction had a batch traversed in this run, or an ABORT marker whose aborted data was
  met in this run, is kept; one whose transaction left nothing (an empty marker) may go once
  it is older than ``delete.retention.ms``, like a tombstone.
- The cleaner only cleans below the last stable offset, so every transaction it meets is
  decided.
"""

from __future__ import annotations

from collections import deque

from .txn_index import AbortedTxn


class CleanedTransactions:
    def __init__(self, aborted: list[AbortedTxn]):
        self._aborted = deque(sorted(aborted, key=lambda a: a.first_offset))
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [entry, data seen]
        self._ongoing_committed: set[int] = set()
        self.retained_aborts: list[AbortedTxn] = []  # for the cleaned segment's .txnindex

    def _consume_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while aborted and aborted[0].first_offset <= offset:
            entry = aborted.popleft()
            self._ongoing_aborted[entry.producer_id] = [entry, False]

    def on_batch(self, last_offset: int, producer_id: int, transactional: bool) -> bool:
        """A data batch read: True when it belongs to an aborted transaction (drop it)."""
        self._consume_up_to(last_offset)
        if not transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_marker(self, last_offset: int, producer_id: int, commit: bool) -> bool:
        """A control batch read: True when its transaction left no data in this run (the
        marker is empty: it may go past the delete horizon)."""
        self._consume_up_to(last_offset)
        if commit:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        ongoing = self._ongoing_aborted.pop(producer_id, None)
        if ongoing is not None and ongoing[1]:
            self.retained_aborts.append(ongoing[0])
            return False
        return True
