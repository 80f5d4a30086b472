"""The transactional producer's state machine (klog/producer/transactions.py) driven by hand
through `ProducerProtocol`: which coordinator request goes when, and what each answer makes of
the transaction (retry, find the coordinator again, abortable, fatal). No broker, no clock."""

from __future__ import annotations

import concurrent.futures

import pytest

from klog.config import ProducerConfig, build
from klog.errors import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionStateError,
)
from klog.producer.producer_machine import ProducerProtocol
from klog.protocol.apis import (
    add_partitions_to_txn,
    end_txn,
    find_coordinator,
    init_producer_id,
    produce,
)
from klog.protocol.error_codes import ErrorCode
from tests.client.fakes import metadata_answer, pid_answer, produce_answer

VALUE = b"v" * 10


def make() -> ProducerProtocol:
    config = build(ProducerConfig, "Producer", {"bootstrap_servers": "h:1",
                                                "transactional_id": "tx", "linger_ms": 0})
    core = ProducerProtocol(config, new_future=concurrent.futures.Future)
    core.cluster.want(["t"])
    core.cluster.update(metadata_answer({"t": 2}), 0)
    return core


def found(node=0):
    return find_coordinator.Response(error_code=0, node_id=node, host="h", port=1)


def one(requests, api):
    (request,) = [r for r in requests if r.api is api]
    return request


def ready(core) -> None:
    """init_transactions answered: producer id 7, epoch 0."""
    future = core.init_transactions()
    request = one(core.poll(0), find_coordinator)
    assert (request.body.key, request.body.key_type) == ("tx", 1)
    core.on_response(request, found(), 0)
    request = one(core.poll(0), init_producer_id)
    assert request.body.transactional_id == "tx" and request.node == 0
    core.on_response(request, pid_answer(7, 0), 0)
    assert future.result(0) is None


def test_partitions_are_added_before_their_first_batch_then_commit_ends_it():
    core = make()
    ready(core)
    core.begin_transaction()
    core.append("t", 1, None, VALUE, None, 1, 0)
    core.accumulator.seal_all()
    requests = core.poll(0)
    assert [r.api for r in requests] == [add_partitions_to_txn]  # no Produce yet
    (topic,) = requests[0].body.v3_and_below_topics
    assert (topic.name, topic.partitions) == ("t", [1])
    core.on_response(requests[0], add_partitions_to_txn.Response(results_by_topic_v3_and_below=[
        add_partitions_to_txn.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            add_partitions_to_txn.AddPartitionsToTxnPartitionResult(
                partition_index=1, partition_error_code=0)])]), 0)
    request = one(core.poll(0), produce)
    assert request.build_body().transactional_id == "tx"
    (batch,) = request.context
    assert batch.transactional and batch.producer_id == 7
    future = core.commit_transaction()
    assert core.poll(0) == []  # the batch is unanswered: no EndTxn yet
    core.on_response(request, produce_answer(request), 0)
    end = one(core.poll(0), end_txn)
    assert end.body.committed is True and end.body.producer_id == 7
    core.on_response(end, end_txn.Response(error_code=0), 0)
    assert future.result(0) is None
    core.begin_transaction()  # READY again


def test_retriable_answers_are_retried_and_not_coordinator_finds_it_again():
    core = make()
    ready(core)
    core.begin_transaction()
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.accumulator.seal_all()
    add = one(core.poll(0), add_partitions_to_txn)
    core.on_response(add, add_partitions_to_txn.Response(results_by_topic_v3_and_below=[
        add_partitions_to_txn.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            add_partitions_to_txn.AddPartitionsToTxnPartitionResult(
                partition_index=0, partition_error_code=ErrorCode.CONCURRENT_TRANSACTIONS)])]),
        0)
    assert core.poll(0) == []  # backing off
    add = one(core.poll(100), add_partitions_to_txn)
    core.on_response(add, add_partitions_to_txn.Response(results_by_topic_v3_and_below=[
        add_partitions_to_txn.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            add_partitions_to_txn.AddPartitionsToTxnPartitionResult(
                partition_index=0, partition_error_code=ErrorCode.NOT_COORDINATOR)])]), 100)
    request = one(core.poll(1000), find_coordinator)
    core.on_response(request, found(node=1), 1000)
    add = one(core.poll(1000), add_partitions_to_txn)
    assert add.node == 1


def test_fencing_is_fatal_and_says_close():
    core = make()
    ready(core)
    core.begin_transaction()
    future = core.commit_transaction()  # nothing added: ends locally
    core.poll(0)
    assert future.result(0) is None
    core.begin_transaction()
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.accumulator.seal_all()
    add = one(core.poll(0), add_partitions_to_txn)
    core.on_response(add, add_partitions_to_txn.Response(results_by_topic_v3_and_below=[
        add_partitions_to_txn.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            add_partitions_to_txn.AddPartitionsToTxnPartitionResult(
                partition_index=0, partition_error_code=ErrorCode.PRODUCER_FENCED)])]), 0)
    core.poll(0)
    (batch, error) = core.take_completed()[0]
    assert isinstance(error, ProducerFencedError)
    with pytest.raises(TransactionFatalError):
        core.commit_transaction()
    with pytest.raises(TransactionFatalError):
        core.begin_transaction()


def test_a_failed_batch_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch():
    core = make()
    ready(core)
    core.begin_transaction()
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.accumulator.seal_all()
    add = one(core.poll(0), add_partitions_to_txn)
    core.on_response(add, add_partitions_to_txn.Response(results_by_topic_v3_and_below=[
        add_partitions_to_txn.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            add_partitions_to_txn.AddPartitionsToTxnPartitionResult(
                partition_index=0, partition_error_code=0)])]), 0)
    request = one(core.poll(0), produce)
    core.on_response(request, produce_answer(
        request, lambda b: (ErrorCode.INVALID_RECORD, -1)), 0)
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        core.commit_transaction()
    future = core.abort_transaction()
    end = one(core.poll(0), end_txn)
    assert end.body.committed is False
    core.on_response(end, end_txn.Response(error_code=0), 0)
    bump = one(core.poll(0), init_producer_id)  # KIP-360: the sequence gap closes
    assert (bump.body.producer_id, bump.body.producer_epoch) == (7, 0)
    core.on_response(bump, pid_answer(7, 1), 0)
    assert future.result(0) is None
    assert core.sequences.producer_epoch == 1
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        core.commit_transaction()
