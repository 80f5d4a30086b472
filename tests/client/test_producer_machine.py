"""The producer's sans-IO state machine, driven by hand: no broker, no clock, no threads."""

from __future__ import annotations

import random

import pytest

from klog.config import ProducerConfig, build
from klog.errors import ClosedError, KafkaError, KafkaTimeoutError, MessageSizeTooLargeError
from klog.producer.producer_machine import ProducerProtocol
from klog.protocol.apis import init_producer_id, metadata, produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.partitioner import partition_for_key
from klog.protocol.record_batch import read_header
from tests.client.fakes import metadata_answer, pid_answer, produce_answer

VALUE = b"v" * 100


class Done:
    """A stand-in for the I/O flavour's future: the core never touches it."""


def make(topics=None, **options) -> ProducerProtocol:
    config = build(ProducerConfig, "Producer", {"bootstrap_servers": "h:1", **options})
    core = ProducerProtocol(config, new_future=Done, rng=random.Random(5))
    if topics is not None:
        core.cluster.want(topics)
        core.cluster.update(metadata_answer(topics), 0)
        if config.enable_idempotence:
            core.sequences.set_producer_id(7, 0)
    return core


def produces(requests):
    return [r for r in requests if r.api is produce]


def test_append_waits_for_metadata_then_goes_to_a_partition():
    core = make()
    assert core.append("t", None, None, VALUE, None, 1, 0) is None
    (request, pid) = core.poll(0)
    assert request.api is metadata and [t.name for t in request.body.topics] == ["t"]
    assert pid.api is init_producer_id
    core.on_response(request, metadata_answer({"t": 3}), 0)
    core.on_response(pid, pid_answer(), 0)
    batch, index = core.append("t", None, None, VALUE, None, 1, 0)
    assert index == 0 and 0 <= batch.partition < 3


def test_keys_go_where_murmur2_says_and_keyless_records_stick_for_a_batch():
    core = make({"t": 7}, batch_size=1000, acks=1)
    for i in range(50):
        key = f"user-{i}".encode()
        batch, _ = core.append("t", None, key, VALUE, None, 1, 0)
        assert batch.partition == partition_for_key(key, 7)
    seen = [core.append("t", None, None, VALUE, None, 1, 0)[0].partition for _ in range(40)]
    runs = [p for i, p in enumerate(seen) if i == 0 or seen[i - 1] != p]
    assert len(runs) >= 4 and all(runs[i] != runs[i + 1] for i in range(len(runs) - 1))


def test_batches_seal_at_batch_size_and_after_linger():
    core = make({"t": 1}, batch_size=1000, linger_ms=10, acks=1)
    for _ in range(12):  # ~116 bytes each: 8 fit in 1000
        core.append("t", 0, None, VALUE, None, 1, 0)
    first = produces(core.poll(0))
    assert [len(b.records) for b in first[0].context] == [8]
    assert produces(core.poll(9)) == []
    assert core.next_poll_ms(9) == 10
    second = produces(core.poll(10))
    assert [len(b.records) for b in second[0].context] == [4]


def test_idempotent_batches_are_stamped_in_sequence_and_encoded_once():
    core = make({"t": 1}, batch_size=500, linger_ms=0)
    for _ in range(9):
        core.append("t", 0, None, VALUE, None, 1, 0)
    requests = produces(core.poll(0))
    assert len(requests) == 3  # one batch per partition per request, 5 may fly
    headers = []
    for request in requests:
        body = request.build_body()
        data = body.topic_data[0].partition_data[0].records
        headers.append(read_header(data))
        assert request.build_body().topic_data[0].partition_data[0].records is data
    assert [(h.producer_id, h.base_sequence, h.records_count) for h in headers] == [
        (7, 0, 4), (7, 4, 4), (7, 8, 1)]


def test_no_produce_before_the_producer_id():
    core = make({"t": 1}, linger_ms=0)
    core.sequences.producer_id = -1
    core.append("t", 0, None, VALUE, None, 1, 0)
    requests = core.poll(0)
    assert [r.api for r in requests] == [init_producer_id]
    core.on_response(requests[0], pid_answer(11, 2), 0)
    (request,) = core.poll(0)
    assert read_header(request.build_body().topic_data[0].partition_data[0].records)[9:11] == (
        11, 2)


def test_success_completes_batches_with_base_offsets():
    core = make({"t": 2}, linger_ms=0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.append("t", 1, None, VALUE, None, 2, 0)
    (request,) = core.poll(0)
    core.on_response(request, produce_answer(request, lambda b: (0, 40 + b.partition)), 1)
    done = {b.partition: value for b, value in core.take_completed()}
    assert done == {0: (40, -1, 0), 1: (41, -1, 0)}
    assert core.accumulator.buffered_bytes == 0


def test_leadership_error_refreshes_metadata_and_retries_alone_after_backoff():
    core = make({"t": 1}, linger_ms=0, retry_backoff_ms=50, batch_size=200)
    for _ in range(3):
        core.append("t", 0, None, VALUE, None, 1, 0)
    first, second, third = core.poll(0)
    core.on_response(first, produce_answer(
        first, lambda b: (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)), 1)
    assert core.take_completed() == []
    assert core.cluster.refresh_due_ms(1) == 1  # stale: refresh now
    core.on_response(second, produce_answer(
        second, lambda b: (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)), 2)
    assert core.take_completed() == []  # retriable: an earlier batch is still unacked
    assert produces(core.poll(10)) == []  # backoff
    assert produces(core.poll(60)) == []  # a retry waits for the partition to go quiet
    core.on_response(third, produce_answer(
        third, lambda b: (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)), 61)
    (retry,) = produces(core.poll(120))
    assert [b.base_sequence for b in retry.context] == [0]
    core.on_response(retry, produce_answer(retry, lambda b: (0, 0)), 121)
    (retry2,) = produces(core.poll(122))
    assert [b.base_sequence for b in retry2.context] == [1]


def test_a_retry_skips_its_backoff_once_the_partition_has_a_new_leader():
    """KIP-951: the backoff spares the leader a batch failed on; once metadata names a newer
    leader epoch the retry goes to the new leader at once. The same leader (the same epoch,
    as before a dead leader's session has expired) keeps the backoff."""
    core = make(linger_ms=0, retry_backoff_ms=100)
    core.cluster.want(["t"])
    core.cluster.update(metadata_answer({"t": 1}, nodes=(1, 2), leader=lambda t, p: 1,
                                        epoch=lambda t, p: 4), 0)
    core.sequences.set_producer_id(7, 0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = produces(core.poll(0))
    assert request.node == 1
    core.on_failure(request, ClosedError("connection refused"), 1)
    (refresh,) = core.poll(2)
    assert refresh.api is metadata
    core.on_response(refresh, metadata_answer({"t": 1}, nodes=(1, 2), leader=lambda t, p: 1,
                                              epoch=lambda t, p: 4), 3)
    assert produces(core.poll(4)) == []  # the same leader: the backoff holds
    core.on_failure(produces(core.poll(101))[0], ClosedError("connection refused"), 102)
    (refresh,) = core.poll(103)
    core.on_response(refresh, metadata_answer({"t": 1}, nodes=(1, 2), leader=lambda t, p: 2,
                                              epoch=lambda t, p: 5), 104)
    (retry,) = produces(core.poll(105))  # 97 ms before its backoff would have ended
    assert retry.node == 2 and [b.base_sequence for b in retry.context] == [0]
    core.on_response(retry, produce_answer(retry, lambda b: (0, 40)), 106)
    ((_, value),) = core.take_completed()
    assert value[0] == 40


def test_a_retry_keeps_its_backoff_without_leader_epochs():
    core = make({"t": 1}, linger_ms=0, retry_backoff_ms=100)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = produces(core.poll(0))
    core.on_failure(request, ClosedError("connection refused"), 1)
    (refresh,) = core.poll(2)
    core.on_response(refresh, metadata_answer({"t": 1}, nodes=(0, 2), leader=lambda t, p: 2), 3)
    assert produces(core.poll(4)) == []
    (retry,) = produces(core.poll(101))
    assert retry.node == 2


def test_out_of_order_without_an_earlier_failure_is_fatal_and_resets_the_producer_id():
    core = make({"t": 1}, linger_ms=0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = core.poll(0)
    core.on_response(request, produce_answer(
        request, lambda b: (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)), 1)
    ((_, error),) = core.take_completed()
    assert isinstance(error, KafkaError) and error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "t[0]" in str(error)
    assert [r.api for r in core.poll(2)] == [init_producer_id]


def test_lost_connection_retries_then_fails_when_retries_run_out():
    core = make({"t": 1}, linger_ms=0, acks=1, retries=1, retry_backoff_ms=0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = core.poll(0)
    core.on_failure(request, ClosedError("gone"), 1)
    assert core.take_completed() == []
    (again,) = produces(core.poll(2))
    core.on_failure(again, ClosedError("gone again"), 3)
    ((_, error),) = core.take_completed()
    assert str(error) == "gone again"


def test_non_retriable_error_fails_at_once_with_a_typed_error():
    core = make({"t": 1}, linger_ms=0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = core.poll(0)
    core.on_response(request, produce_answer(request, lambda b: (ErrorCode.MESSAGE_TOO_LARGE,
                                                                 -1)), 1)
    ((_, error),) = core.take_completed()
    assert isinstance(error, MessageSizeTooLargeError)


def test_delivery_timeout_fails_batches_still_queued():
    core = make({"t": 1}, linger_ms=0, delivery_timeout_ms=100)
    core.sequences.producer_id = -1  # nothing can be sent
    core.sequences.requesting = True
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.poll(50)
    assert core.take_completed() == []
    core.poll(100)
    ((_, error),) = core.take_completed()
    assert isinstance(error, KafkaTimeoutError)


def test_in_flight_limit_per_node():
    core = make({"t": 1}, linger_ms=0, batch_size=150, acks=1,
                max_in_flight_requests_per_connection=2)
    for _ in range(5):
        core.append("t", 0, None, VALUE, None, 1, 0)
    first = produces(core.poll(0))
    assert len(first) == 2
    core.on_response(first[0], produce_answer(first[0]), 1)
    assert len(produces(core.poll(1))) == 1


def test_acks_zero_completes_when_written():
    core = make({"t": 1}, linger_ms=0, acks=0)
    core.append("t", 0, None, VALUE, None, 1, 0)
    (request,) = core.poll(0)
    assert request.expect_response is False
    core.on_response(request, None, 1)
    assert [value for _, value in core.take_completed()] == [(-1, -1, -1)]


def test_buffer_memory_and_record_checks():
    core = make({"t": 1}, buffer_memory=1000, acks=1, max_request_size=5000)
    while core.append("t", 0, None, VALUE, None, 1, 0) is not None:
        pass
    assert core.memory_full
    core = make({"t": 1}, acks=1, max_request_size=500)
    with pytest.raises(MessageSizeTooLargeError):
        core.append("t", 0, None, b"x" * 600, None, 1, 0)
    with pytest.raises(TypeError, match="value_serializer"):
        core.append("t", 0, None, "text", None, 1, 0)
    with pytest.raises(ValueError, match="partition 3"):
        core.append("t", 3, None, VALUE, None, 1, 0)


def test_send_batch_spans_batches_in_order():
    core = make({"t": 1}, batch_size=1000, acks=1)
    spans = core.append_many("t", None, b"k", [VALUE] * 20, None, 1, 0)
    assert [count for _, _, count in spans] == [8, 8, 4]
    assert all(batch.partition == 0 for batch, _, _ in spans)


def test_abort_fails_everything_unsent():
    core = make({"t": 1}, acks=1)
    core.append("t", 0, None, VALUE, None, 1, 0)
    core.abort()
    ((_, error),) = core.take_completed()
    assert isinstance(error, ClosedError)


def test_full_requests_take_turns_between_partitions():
    # batches as large as a request: each request carries one, and no partition may take
    # every request while the others wait (Kafka's drain index)
    core = make({"t": 3}, linger_ms=0, batch_size=1000, max_request_size=1000, acks=1,
                max_in_flight_requests_per_connection=5)
    for partition in (0, 1, 2):
        for _ in range(4 * 9):
            core.append("t", partition, None, VALUE, None, 1, 0)
    outstanding = produces(core.poll(0))
    assert len(outstanding) == 5
    assert {request.context[0].partition for request in outstanding} == {0, 1, 2}
    later = []
    for _ in range(6):  # each answer frees one slot: the turns go on
        answered = outstanding.pop(0)
        core.on_response(answered, produce_answer(answered), 1)
        sent = produces(core.poll(1))
        outstanding += sent
        later += [request.context[0].partition for request in sent]
    assert sorted(later) == [0, 0, 1, 1, 2, 2]
