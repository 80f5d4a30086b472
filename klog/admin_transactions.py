"""What klog.Admin's transaction calls return (Kafka's kafka-transactions.sh shows the same):
ListTransactions answers from every node, DescribeTransactions from the transactional id's
coordinator (FindCoordinator key type 1)."""

from __future__ import annotations

from dataclasses import dataclass

from klog.types import TopicPartition

__all__ = ["TransactionDescription", "TransactionListing"]


@dataclass(frozen=True, order=True)
class TransactionListing:
    """One transactional id as its coordinator lists it ("Empty", "Ongoing",
    "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    """A transactional id's current transaction: its producer id and epoch, the partitions it
    added, when it started (-1 outside a transaction) and its timeout."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]
    coordinator: int

    @property
    def is_open(self) -> bool:
        """Not yet committed or aborted (it holds back the LSO of its partitions)."""
        return self.state in ("Ongoing", "PrepareCommit", "PrepareAbort")


def describe_transaction(state, coordinator: int) -> TransactionDescription:
    """A DescribeTransactions answer's TransactionState, as a TransactionDescription."""
    return TransactionDescription(
        state.transactional_id, state.transaction_state, state.producer_id,
        state.producer_epoch, state.transaction_timeout_ms, state.transaction_start_time_ms,
        tuple(sorted(TopicPartition(t.topic, p) for t in state.topics for p in t.partitions)),
        coordinator)
