"""The transaction state machine, pure: Kafka's states, its legal transitions, and what each
request makes of a transactional id's metadata (or the error Kafka answers).

Each operation takes the current :class:`TxnMetadata` (None: the id is unknown) and returns
the metadata to write to ``__transaction_state`` before answering, or raises
:class:`TxnError` with Kafka's error code. Nothing here does I/O or reads a clock: the
coordinator passes ``now_ms`` and new producer ids in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

from klog.protocol.error_codes import ErrorCode

MAX_EPOCH = 32767 - 1  # Kafka's Short.MaxValue - 1: the last epoch handed out for an id
NO_PRODUCER_ID = -1
NO_EPOCH = -1


class TxnState(IntEnum):
    """Kafka's TransactionState, with the ids its log records carry."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """The name DescribeTransactions and ListTransactions answer."""
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> TxnState | None:
        return _BY_LABEL.get(label)


_LABELS = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_LABEL = {label: state for state, label in _LABELS.items()}

S = TxnState
# Kafka's validPreviousStates: a state may only be entered from these.
PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
ENDED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class TxnError(Exception):
    def __init__(self, code: ErrorCode, message: str = ""):
        super().__init__(message or code.name)
        self.code = code


class IllegalTransition(TxnError):
    def __init__(self, old: TxnState, new: TxnState):
        super().__init__(ErrorCode.INVALID_TXN_STATE, f"{old.label} -> {new.label} is illegal")


def check_transition(old: TxnState, new: TxnState) -> None:
    if old not in PREVIOUS[new]:
        raise IllegalTransition(old, new)


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id as ``__transaction_state`` records it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    start_ms: int = -1  # when the open transaction began (-1: none)
    update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID  # before the last fence (a retried init)
    last_producer_epoch: int = NO_EPOCH

    def to(self, state: TxnState, now_ms: int, **changes) -> TxnMetadata:
        check_transition(self.state, state)
        return dataclasses.replace(self, state=state, update_ms=now_ms, **changes)


@dataclass(frozen=True)
class InitResult:
    """What InitProducerId does: ``write`` to the log; ``answer`` the client gets once it is
    written (CONCURRENT_TRANSACTIONS when an open transaction is being aborted first)."""

    write: TxnMetadata | None
    answer: ErrorCode = ErrorCode.NONE


def _bumped(meta: TxnMetadata, new_producer_id) -> dict:
    """The next (producer id, epoch): the epoch + 1, or a new id once the epoch is spent."""
    if meta.producer_epoch >= MAX_EPOCH:  # a retry names the old id and its spent epoch
        return {"producer_id": new_producer_id(), "producer_epoch": 0,
                "last_producer_id": meta.producer_id, "last_producer_epoch": meta.producer_epoch}
    return {"producer_epoch": meta.producer_epoch + 1,
            "last_producer_id": meta.producer_id, "last_producer_epoch": meta.producer_epoch}


def init_producer_id(meta: TxnMetadata | None, transactional_id: str, *, timeout_ms: int,
                     max_timeout_ms: int, expected_id: int, expected_epoch: int,
                     new_producer_id, now_ms: int) -> InitResult:
    """InitProducerId with a transactional id (Kafka's handleInitProducerId): a new id, or
    the same id with its epoch bumped, which fences every older producer of the id. An open
    transaction is aborted first (answered CONCURRENT_TRANSACTIONS: the client retries).
    KIP-360: ``expected_id``/``expected_epoch`` (v3+) must be the current pair, or the pair
    the last bump answered (a retry)."""
    if not 0 < timeout_ms <= max_timeout_ms:
        raise TxnError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                       f"transaction.timeout.ms {timeout_ms} is outside "
                       f"(0, transaction.max.timeout.ms={max_timeout_ms}]")
    if meta is None or meta.state is S.DEAD:
        return InitResult(TxnMetadata(transactional_id, new_producer_id(), 0, timeout_ms,
                                      S.EMPTY, frozenset(), -1, now_ms))
    if expected_id != NO_PRODUCER_ID:
        current = (expected_id, expected_epoch) == (meta.producer_id, meta.producer_epoch)
        retried = (expected_id, expected_epoch) == (meta.last_producer_id,
                                                    meta.last_producer_epoch)
        if retried and meta.state in ENDED:  # a retry of the bump that made the current pair
            return InitResult(None)
        if not current:
            raise TxnError(ErrorCode.PRODUCER_FENCED,
                           f"producer {expected_id} epoch {expected_epoch} is not the current "
                           f"{meta.producer_id} epoch {meta.producer_epoch}")
    if meta.state in PREPARED or meta.state is S.PREPARE_EPOCH_FENCE:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a transaction is {meta.state.label}")
    if meta.state is S.ONGOING:  # fence the open transaction's producer and abort it
        return InitResult(abort_with_fence(meta, now_ms, new_producer_id),
                          ErrorCode.CONCURRENT_TRANSACTIONS)
    return InitResult(meta.to(S.EMPTY, now_ms, timeout_ms=timeout_ms, partitions=frozenset(),
                              start_ms=-1, **_bumped(meta, new_producer_id)))


def abort_with_fence(meta: TxnMetadata, now_ms: int, new_producer_id) -> TxnMetadata:
    """An open transaction aborted by the coordinator (a new producer of the id, or its
    timeout): the epoch is bumped first (PrepareEpochFence), so its producer is fenced."""
    check_transition(meta.state, S.PREPARE_EPOCH_FENCE)
    bump = _bumped(meta, new_producer_id)
    bump.pop("last_producer_id")
    bump.pop("last_producer_epoch")
    fenced = dataclasses.replace(meta, state=S.PREPARE_EPOCH_FENCE, **bump)
    return fenced.to(S.PREPARE_ABORT, now_ms)


MAX_ID_BYTES = 32767  # a Kafka string's limit: the id is one in __transaction_state's key


def check_transactional_id(transactional_id: str | None) -> None:
    """Kafka refuses an empty (or null) transactional id with INVALID_REQUEST before anything
    else, at any broker. A longer id than a Kafka string holds (only a compact string can
    carry one) does not even parse in Kafka; here it is INVALID_REQUEST too, as it could not
    be written to ``__transaction_state``."""
    if not transactional_id:
        raise TxnError(ErrorCode.INVALID_REQUEST, "an empty transactional id")
    if len(transactional_id) > MAX_ID_BYTES // 4 and \
            len(transactional_id.encode()) > MAX_ID_BYTES:
        raise TxnError(ErrorCode.INVALID_REQUEST,
                       f"a transactional id longer than {MAX_ID_BYTES} bytes")


def check_producer(meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> TxnMetadata:
    """The producer must be the id's current one: Kafka checks this before anything else, a
    transition in flight included, so a fenced producer hears it is fenced."""
    if meta is None or meta.state is S.DEAD or meta.producer_id != producer_id:
        raise TxnError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                       "the producer id is not this transactional id's")
    if producer_epoch != meta.producer_epoch:
        raise TxnError(ErrorCode.PRODUCER_FENCED,
                       f"epoch {producer_epoch} is fenced by {meta.producer_epoch}")
    return meta


def add_partitions(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                   partitions, now_ms: int) -> TxnMetadata | None:
    """AddPartitionsToTxn (and AddOffsetsToTxn's partition): the transaction is Ongoing with
    them; None when it already has them all (nothing to write)."""
    meta = check_producer(meta, producer_id, producer_epoch)
    if meta.state in PREPARED or meta.state is S.PREPARE_EPOCH_FENCE:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a transaction is {meta.state.label}")
    wanted = frozenset(partitions)
    if meta.state is S.ONGOING and wanted <= meta.partitions:
        return None
    start = meta.start_ms if meta.state is S.ONGOING else now_ms
    base = meta.partitions if meta.state is S.ONGOING else frozenset()
    return meta.to(S.ONGOING, now_ms, partitions=base | wanted, start_ms=start)


def verify_partitions(meta: TxnMetadata | None, producer_id: int, producer_epoch: int,
                      partitions, not_added: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn v4+ with ``verify_only`` (KIP-890, Kafka's
    handleVerifyPartitionsInTransaction): whether each partition is in the id's ongoing
    transaction, changing nothing. The same producer checks as an add, then a transaction
    being prepared is CONCURRENT_TRANSACTIONS (the leader answers its producer a retriable
    error); a partition outside the transaction is ``not_added`` (INVALID_TXN_STATE at v4,
    TRANSACTION_ABORTABLE at v5). The state looked at is the one written: a partition is in
    once its AddPartitionsToTxn is in the log, out once the Complete* state is."""
    meta = check_producer(meta, producer_id, producer_epoch)
    if meta.state in PREPARED:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"a transaction is {meta.state.label}")
    return {p: ErrorCode.NONE if p in meta.partitions else not_added for p in partitions}


def end_txn(meta: TxnMetadata | None, producer_id: int, producer_epoch: int, commit: bool,
            now_ms: int) -> TxnMetadata | None:
    """EndTxn: PrepareCommit or PrepareAbort of the open transaction; None for a retry of an
    EndTxn already decided the same way (answered NONE, nothing written)."""
    meta = check_producer(meta, producer_id, producer_epoch)
    same = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
    if meta.state is S.ONGOING:
        return meta.to(same, now_ms)
    if meta.state is done:
        return None
    if meta.state is same:
        raise TxnError(ErrorCode.CONCURRENT_TRANSACTIONS, f"the transaction is {same.label}")
    raise TxnError(ErrorCode.INVALID_TXN_STATE,
                   f"EndTxn({'commit' if commit else 'abort'}) in state {meta.state.label}")


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every marker is written: CompleteCommit or CompleteAbort, no partitions left."""
    if meta.state not in PREPARED:
        raise IllegalTransition(meta.state, S.COMPLETE_COMMIT)
    state = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    return meta.to(state, now_ms, partitions=frozenset())


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    """An Ongoing transaction open longer than its producer's transaction.timeout.ms."""
    return meta.state is S.ONGOING and meta.start_ms >= 0 \
        and now_ms > meta.start_ms + meta.timeout_ms


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """An idle id (no open transaction) unused for transactional.id.expiration.ms."""
    return meta.state in ENDED and now_ms > meta.update_ms + expiration_ms


def fenced_code(code: ErrorCode, *, version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) only at the versions that know it; INVALID_PRODUCER_EPOCH
    below ``fenced_since``."""
    if code is ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
