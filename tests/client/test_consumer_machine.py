"""The consumer's sans-IO state machine, driven by hand: no broker, no clock, no sockets."""

from __future__ import annotations

import pytest

from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.errors import NoOffsetForPartitionError, OffsetOutOfRangeError
from klog.protocol.apis import fetch, list_offsets, metadata
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch, control_record
from klog.types import ConsumerRecord, TopicPartition
from tests.client.fakes import fetch_answer, metadata_answer, offsets_answer

TP = TopicPartition("t", 0)


def make(**options) -> ConsumerProtocol:
    config = build(ConsumerConfig, "Consumer", {"bootstrap_servers": "h:1", **options})
    core = ConsumerProtocol(config)
    core.assign([TP])
    (request,) = core.poll(0)
    assert request.api is metadata
    core.on_response(request, metadata_answer({"t": 1}), 0)
    return core


def batch(base: int, count: int, codec: int = 0) -> bytes:
    return build_batch([(1000 + i, None, b"v%d" % (base + i), []) for i in range(count)],
                       base_offset=base, codec=codec)


def only(requests, api):
    (request,) = [r for r in requests if r.api is api]
    return request


def test_reset_lookup_then_fetch_from_the_answer():
    core = make(auto_offset_reset="earliest")
    lookup = only(core.poll(0), list_offsets)
    assert lookup.body.topics[0].partitions[0].timestamp == -2
    core.on_response(lookup, offsets_answer(lookup, {("t", 0): 5}), 1)
    assert core.position(TP) == 5
    request = only(core.poll(1), fetch)
    assert request.body.topics[0].partitions[0].fetch_offset == 5


def test_next_fetch_goes_out_before_records_are_decoded():
    core = make()
    core.seek(TP, 0)
    first = only(core.poll(0), fetch)
    core.on_response(first, fetch_answer(first, {("t", 0): batch(0, 3) + batch(3, 2)}), 1)
    second = only(core.poll(1), fetch)  # pipelined: nothing taken yet
    assert second.body.topics[0].partitions[0].fetch_offset == 5
    assert core.position(TP) == 0
    tp, records = core.take_chunk()
    assert [r.offset for r in records] == [0, 1, 2, 3, 4] and core.position(TP) == 5
    record = records[0]
    assert isinstance(record, ConsumerRecord)
    assert (record.topic, record.partition, record.value, record.timestamp) == (
        "t", 0, b"v0", 1000)


def test_a_partial_batch_at_the_end_is_fetched_again():
    core = make()
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    data = batch(0, 3) + batch(3, 3)[:-5]
    core.on_response(request, fetch_answer(request, {("t", 0): data}), 1)
    assert only(core.poll(1), fetch).body.topics[0].partitions[0].fetch_offset == 3


def test_seek_while_fetching_drops_the_stale_answer():
    core = make()
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    core.seek(TP, 40)
    core.on_response(request, fetch_answer(request, {("t", 0): batch(0, 3)}), 1)
    assert core.take_chunk() is None
    assert only(core.poll(1), fetch).body.topics[0].partitions[0].fetch_offset == 40


def test_records_before_the_position_are_dropped_from_a_compressed_batch():
    core = make()
    core.seek(TP, 7)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {("t", 0): batch(5, 5, codec=3)}), 1)
    _, records = core.take_chunk()
    assert [r.offset for r in records] == [7, 8, 9]


def test_control_batches_are_skipped_but_counted():
    core = make()
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    marker = build_batch([(1, *control_record(1), [])], base_offset=2, is_control=True,
                         producer_id=3, producer_epoch=0, is_transactional=True)
    core.on_response(request, fetch_answer(request, {("t", 0): batch(0, 2) + marker}), 1)
    _, records = core.take_chunk()
    assert [r.offset for r in records] == [0, 1] and core.position(TP) == 3


def test_offset_out_of_range_resets_per_policy():
    core = make(auto_offset_reset="latest")
    core.seek(TP, 1000)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {}, error=ErrorCode.OFFSET_OUT_OF_RANGE), 1)
    lookup = only(core.poll(1), list_offsets)
    assert lookup.body.topics[0].partitions[0].timestamp == -1
    core.on_response(lookup, offsets_answer(lookup, {("t", 0): 12}), 2)
    assert core.position(TP) == 12


def test_offset_out_of_range_without_a_policy_raises():
    core = make(auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError):
        core.raise_pending()
    core.seek(TP, 1000)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {}, error=ErrorCode.OFFSET_OUT_OF_RANGE), 1)
    with pytest.raises(OffsetOutOfRangeError, match=r"t\[0\]"):
        core.raise_pending()
    assert core.position(TP) == 1000


def test_take_records_splits_at_max_records_and_keeps_the_rest():
    core = make()
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {("t", 0): batch(0, 10)}), 1)
    first = core.take_records(4)
    assert [r.offset for r in first[TP]] == [0, 1, 2, 3] and core.position(TP) == 4
    rest = core.take_records(100)
    assert [r.offset for r in rest[TP]] == list(range(4, 10)) and core.position(TP) == 10


def test_user_lookup_answers_offsets_for_times():
    core = make()
    core.seek(TP, 0)
    lookup = core.lookup({TP: 1500})
    request = only(core.poll(0), list_offsets)
    core.on_response(request, offsets_answer(request, {("t", 0): -1}), 1)
    assert lookup.done and lookup.results == {TP: None}


def test_leadership_error_refreshes_metadata_and_backs_off():
    core = make(retry_backoff_ms=100)
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {},
                                           error=ErrorCode.NOT_LEADER_OR_FOLLOWER), 1)
    requests = core.poll(2)
    assert [r.api for r in requests] == [metadata]
    assert core.next_poll_ms(2) == 101


def test_a_seek_does_not_wait_for_the_stale_long_poll():
    core = make()
    core.seek(TP, 0)
    first = only(core.poll(0), fetch)
    assert first.channel == "fetch"
    assert [r for r in core.poll(1) if r.api is fetch] == []  # one live fetch per node
    core.seek(TP, 50)  # the fetch in flight is now worthless (maybe a long poll)
    spare = only(core.poll(2), fetch)
    assert (spare.channel, spare.body.topics[0].partitions[0].fetch_offset) == (
        "fetch-spare", 50)
    core.on_response(first, fetch_answer(first, {("t", 0): batch(0, 3)}), 3)
    assert core.take_chunk() is None  # the stale answer is dropped
    core.on_response(spare, fetch_answer(spare, {("t", 0): batch(50, 2)}), 4)
    assert [r.offset for r in core.take_chunk()[1]] == [50, 51]
