"""The blocking producer's transaction calls: each starts a step of the transaction state
machine (`klog.producer.transactions`) under the producer's lock, wakes the sender, and waits
for its future outside the lock. A call that times out leaves its step running: call it
again to keep waiting (Kafka's rule for init_transactions and commit_transaction).
"""

from __future__ import annotations

import concurrent.futures
import functools
from typing import Any

from klog.errors import ClosedError, KafkaTimeoutError


class TransactionalCalls:
    """Mixed into `klog.Producer`; uses its ``_lock``, ``_core`` and ``_network``."""

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get the transactional id's producer id and epoch from its coordinator; every
        earlier producer with this id is fenced, and a transaction it left open is ended
        first. Call once, before the first transaction."""
        self._txn_wait(lambda core: core.init_transactions(), timeout, "init_transactions")

    def begin_transaction(self) -> None:
        """Open a transaction: sends from now on belong to it."""
        with self._lock:
            self._check_txn_open()
            self._core.begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any,
                                    timeout: float | None = None) -> None:
        """Commit a consumer group's offsets (``{TopicPartition: next offset to read or
        OffsetAndMetadata}``) as part of the transaction: they count only if it commits.
        ``group_metadata`` is ``consumer.group_metadata()``."""
        self._txn_wait(lambda core: core.send_offsets_to_transaction(offsets, group_metadata),
                       timeout, "send_offsets_to_transaction")

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit: every record sent and every offset sent in the transaction
        becomes visible to read_committed consumers at once. TransactionAbortableError:
        abort_transaction() and redo the work; ProducerFencedError: close."""
        self._txn_wait(lambda core: core.commit_transaction(), timeout, "commit_transaction")

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort: records not yet sent fail, and what was written is never visible to
        read_committed consumers."""
        self._txn_wait(lambda core: core.abort_transaction(), timeout, "abort_transaction")

    def _txn_wait(self, start, timeout: float | None, what: str) -> None:
        with self._lock:
            self._check_txn_open()
            future = start(self._core)
        if future is None:
            return
        self._network.wakeup()
        try:
            future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise KafkaTimeoutError(f"{what}() did not finish within {timeout} s; it goes on: "
                                    f"call {what}() again to keep waiting") from None

    def _check_txn_open(self) -> None:
        if self._closed:
            raise ClosedError("the producer is closed")

    def _checked(self, send):
        """send/send_batch of a transactional producer: only inside a transaction."""
        transactions = self._core.transactions

        @functools.wraps(send)
        def checked(*args, **kwargs):
            transactions.check_send()
            return send(*args, **kwargs)

        return checked
