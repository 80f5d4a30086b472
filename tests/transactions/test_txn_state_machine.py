"""The transaction state machine alone: Kafka's transitions and errors (state.py)."""

from __future__ import annotations

import itertools

import pytest

from appliance.workers.transactions import state as txn
from appliance.workers.transactions.state import TxnError, TxnMetadata, TxnState
from klog.protocol.error_codes import ErrorCode

S = TxnState
MAX_TIMEOUT = 900_000


def ids(start=1000):
    counter = itertools.count(start)
    return lambda: next(counter)


def init(meta, *, timeout_ms=60_000, expected_id=-1, expected_epoch=-1, new_id=None, now=10):
    return txn.init_producer_id(meta, "t", timeout_ms=timeout_ms, max_timeout_ms=MAX_TIMEOUT,
                                expected_id=expected_id, expected_epoch=expected_epoch,
                                new_producer_id=new_id or ids(), now_ms=now)


def fresh() -> TxnMetadata:
    return init(None).write


def ongoing() -> TxnMetadata:
    meta = fresh()
    return txn.add_partitions(meta, meta.producer_id, meta.producer_epoch, [("a", 0)], 20)


def test_kafka_state_ids_and_labels():
    assert [(s.value, s.label) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert S.from_label("Ongoing") is S.ONGOING and S.from_label("ongoing") is None


@pytest.mark.parametrize("old,new", [
    (S.EMPTY, S.PREPARE_COMMIT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.ONGOING), (S.PREPARE_ABORT, S.COMPLETE_COMMIT),
    (S.ONGOING, S.DEAD), (S.EMPTY, S.PREPARE_EPOCH_FENCE), (S.ONGOING, S.COMPLETE_ABORT)])
def test_illegal_transitions(old, new):
    with pytest.raises(TxnError) as raised:
        txn.check_transition(old, new)
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE


def test_every_state_has_kafkas_previous_states():
    legal = {(o, n) for n, olds in txn.PREVIOUS.items() for o in olds}
    assert (S.ONGOING, S.PREPARE_COMMIT) in legal
    assert (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT) in legal
    assert (S.COMPLETE_ABORT, S.ONGOING) in legal
    assert len(legal) == 3 + 4 + 1 + 2 + 1 + 1 + 3 + 1


def test_a_new_id_gets_a_producer_id_and_epoch_0():
    meta = fresh()
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (1000, 0, S.EMPTY)


def test_init_again_bumps_the_epoch_and_keeps_the_id():
    meta = init(fresh()).write
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (1000, 1, S.EMPTY)
    assert (meta.last_producer_id, meta.last_producer_epoch) == (1000, 0)


def test_an_exhausted_epoch_gets_a_new_producer_id():
    import dataclasses
    meta = dataclasses.replace(fresh(), producer_epoch=txn.MAX_EPOCH)
    bumped = init(meta, new_id=ids(5000)).write
    assert (bumped.producer_id, bumped.producer_epoch) == (5000, 0)
    # KIP-360: a retry of that bump (the old id, its spent epoch) gets the new pair as is
    assert init(bumped, expected_id=1000, expected_epoch=txn.MAX_EPOCH).write is None
    with pytest.raises(TxnError):
        init(bumped, expected_id=1000, expected_epoch=3)


def test_timeout_over_the_maximum_is_invalid():
    for timeout in (0, MAX_TIMEOUT + 1):
        with pytest.raises(TxnError) as raised:
            init(None, timeout_ms=timeout)
        assert raised.value.code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_init_while_ongoing_fences_and_aborts_first():
    result = init(ongoing())
    assert result.answer == ErrorCode.CONCURRENT_TRANSACTIONS
    assert result.write.state is S.PREPARE_ABORT
    assert result.write.producer_epoch == 1  # the old producer is fenced
    assert result.write.partitions == {("a", 0)}  # its markers go there


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_while_completing_is_concurrent(state):
    meta = txn.end_txn(ongoing(), 1000, 0, state is S.PREPARE_COMMIT, 30)
    with pytest.raises(TxnError) as raised:
        init(meta)
    assert raised.value.code == ErrorCode.CONCURRENT_TRANSACTIONS


def test_kip360_bump_with_the_current_pair():
    meta = fresh()
    bumped = init(meta, expected_id=1000, expected_epoch=0).write
    assert bumped.producer_epoch == 1
    assert init(bumped, expected_id=1000, expected_epoch=0).write is None  # a retry: as is
    with pytest.raises(TxnError) as raised:
        init(bumped, expected_id=1000, expected_epoch=5)
    assert raised.value.code == ErrorCode.PRODUCER_FENCED
    with pytest.raises(TxnError) as raised:
        init(bumped, expected_id=77, expected_epoch=0)
    assert raised.value.code == ErrorCode.PRODUCER_FENCED


def test_add_partitions_begins_and_extends_a_transaction():
    meta = ongoing()
    assert meta.state is S.ONGOING and meta.start_ms == 20
    assert txn.add_partitions(meta, 1000, 0, [("a", 0)], 25) is None  # nothing new
    more = txn.add_partitions(meta, 1000, 0, [("b", 1)], 25)
    assert more.partitions == {("a", 0), ("b", 1)} and more.start_ms == 20


def test_add_partitions_errors():
    meta = fresh()
    for pid, epoch, code in [(1000, 1, ErrorCode.PRODUCER_FENCED),
                             (999, 0, ErrorCode.INVALID_PRODUCER_ID_MAPPING)]:
        with pytest.raises(TxnError) as raised:
            txn.add_partitions(meta, pid, epoch, [("a", 0)], 1)
        assert raised.value.code == code
    with pytest.raises(TxnError) as raised:
        txn.add_partitions(None, 1, 0, [("a", 0)], 1)
    assert raised.value.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    prepared = txn.end_txn(ongoing(), 1000, 0, True, 30)
    with pytest.raises(TxnError) as raised:
        txn.add_partitions(prepared, 1000, 0, [("a", 1)], 31)
    assert raised.value.code == ErrorCode.CONCURRENT_TRANSACTIONS


def test_end_txn_commit_and_abort_then_complete():
    for commit, prepare, done in [(True, S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                  (False, S.PREPARE_ABORT, S.COMPLETE_ABORT)]:
        prepared = txn.end_txn(ongoing(), 1000, 0, commit, 30)
        assert prepared.state is prepare and prepared.partitions == {("a", 0)}
        completed = txn.complete(prepared, 40)
        assert completed.state is done and not completed.partitions
        assert txn.end_txn(completed, 1000, 0, commit, 41) is None  # a retry
        with pytest.raises(TxnError) as raised:
            txn.end_txn(completed, 1000, 0, not commit, 41)
        assert raised.value.code == ErrorCode.INVALID_TXN_STATE
        with pytest.raises(TxnError) as raised:
            txn.end_txn(prepared, 1000, 0, commit, 31)
        assert raised.value.code == ErrorCode.CONCURRENT_TRANSACTIONS
        with pytest.raises(TxnError) as raised:
            txn.end_txn(prepared, 1000, 0, not commit, 31)
        assert raised.value.code == ErrorCode.INVALID_TXN_STATE
        again = txn.add_partitions(completed, 1000, 0, [("c", 0)], 50)
        assert again.state is S.ONGOING and again.partitions == {("c", 0)}


def test_end_txn_without_a_transaction_is_invalid_state():
    with pytest.raises(TxnError) as raised:
        txn.end_txn(fresh(), 1000, 0, True, 30)
    assert raised.value.code == ErrorCode.INVALID_TXN_STATE


def test_end_txn_of_a_fenced_producer():
    fenced = init(ongoing()).write
    with pytest.raises(TxnError) as raised:
        txn.end_txn(fenced, 1000, 0, True, 30)
    assert raised.value.code == ErrorCode.PRODUCER_FENCED


def test_timeout_and_expiry():
    meta = ongoing()  # started at 20, timeout 60 s
    assert not txn.timed_out(meta, 60_020) and txn.timed_out(meta, 60_021)
    aborted = txn.abort_with_fence(meta, 60_021, ids())
    assert aborted.state is S.PREPARE_ABORT and aborted.producer_epoch == 1
    idle = fresh()
    assert not txn.expired(meta, 10**12, 1000)  # never while open
    assert not txn.expired(idle, 1010, 1000) and txn.expired(idle, 1011, 1000)
    assert idle.to(S.DEAD, 2000).state is S.DEAD


def test_fenced_code_for_old_versions():
    assert txn.fenced_code(ErrorCode.PRODUCER_FENCED, version=1, fenced_since=2) \
        == ErrorCode.INVALID_PRODUCER_EPOCH
    assert txn.fenced_code(ErrorCode.PRODUCER_FENCED, version=2, fenced_since=2) \
        == ErrorCode.PRODUCER_FENCED
    assert txn.fenced_code(ErrorCode.NONE, version=0, fenced_since=2) == ErrorCode.NONE
