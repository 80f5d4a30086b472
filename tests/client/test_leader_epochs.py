"""KIP-320 in the consumer's sans-IO machine: leader epochs from Metadata go out in Fetch and
ListOffsets, an older Metadata answer does not move a partition back, the fencing errors
refresh metadata without touching the position, and after a leader change the position is
validated with OffsetForLeaderEpoch before the next fetch."""

from __future__ import annotations

import pytest

from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.errors import LogTruncationError
from klog.protocol.apis import fetch, list_offsets, metadata, offset_for_leader_epoch
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from klog.types import TopicPartition
from tests.client.fakes import fetch_answer, offsets_answer

TP = TopicPartition("t", 0)


def answer(leader: int, epoch: int, nodes=(1, 2)):
    return metadata.Response(
        brokers=[metadata.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n)
                 for n in nodes],
        topics=[metadata.MetadataResponseTopic(name="t", error_code=0, partitions=[
            metadata.MetadataResponsePartition(partition_index=0, leader_id=leader,
                                               leader_epoch=epoch)])])


def make(leader=1, epoch=4, **options) -> ConsumerProtocol:
    config = build(ConsumerConfig, "Consumer", {"bootstrap_servers": "h:1",
                                                "retry_backoff_ms": 100, **options})
    core = ConsumerProtocol(config)
    core.assign([TP])
    (request,) = core.poll(0)
    core.on_response(request, answer(leader, epoch), 0)
    return core


def only(requests, api):
    (request,) = [r for r in requests if r.api is api]
    return request


def refresh(core, now_ms, leader, epoch, requests=None):
    """A Metadata answer; asked for now unless `requests` already holds the request."""
    if requests is None:
        core.cluster.mark_stale()
    request = only(core.poll(now_ms) if requests is None else requests, metadata)
    core.on_response(request, answer(leader, epoch), now_ms)


def test_fetch_and_list_offsets_carry_the_leader_epoch():
    core = make(epoch=4, auto_offset_reset="earliest")
    lookup = only(core.poll(0), list_offsets)
    assert lookup.body.topics[0].partitions[0].current_leader_epoch == 4
    core.on_response(lookup, offsets_answer(lookup, {("t", 0): 7}), 1)
    request = only(core.poll(1), fetch)
    assert request.node == 1
    assert request.body.topics[0].partitions[0].current_leader_epoch == 4


@pytest.mark.parametrize("error", [ErrorCode.FENCED_LEADER_EPOCH,
                                   ErrorCode.UNKNOWN_LEADER_EPOCH,
                                   ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.LEADER_NOT_AVAILABLE])
def test_a_fencing_answer_refreshes_metadata_and_keeps_the_position(error):
    core = make(epoch=4)
    core.seek(TP, 100)
    request = only(core.poll(0), fetch)
    core.on_response(request, fetch_answer(request, {}, error=error), 1)
    assert core.position(TP) == 100
    core.raise_pending()  # nothing for the application: a retry, not an error
    requests = core.poll(2)
    assert not [r for r in requests if r.api is fetch]  # the node is left alone a while
    refresh(core, 2, leader=2, epoch=5, requests=requests)
    request = only(core.poll(200), fetch)
    part = request.body.topics[0].partitions[0]
    assert (request.node, part.fetch_offset, part.current_leader_epoch) == (2, 100, 5)


def test_metadata_older_than_what_was_seen_is_ignored():
    core = make(leader=1, epoch=4)
    refresh(core, 1, leader=2, epoch=5)
    assert (core.cluster.leader_of("t", 0), core.cluster.leader_epoch_of("t", 0)) == (2, 5)
    refresh(core, 2, leader=1, epoch=4)  # a broker that has not heard of the election
    assert (core.cluster.leader_of("t", 0), core.cluster.leader_epoch_of("t", 0)) == (2, 5)
    assert core.cluster.refresh_due_ms(2) <= 2 + 100  # asked again soon
    core.seek(TP, 0)
    request = only(core.poll(3), fetch)
    assert request.node == 2 and request.body.topics[0].partitions[0].current_leader_epoch == 5


def test_a_recreated_topic_starts_its_epochs_over():
    core = make(leader=1, epoch=4)
    core.cluster.mark_stale()
    request = only(core.poll(1), metadata)
    core.on_response(request, metadata.Response(brokers=[], topics=[
        metadata.MetadataResponseTopic(name="t", error_code=int(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), partitions=[])]), 1)
    refresh(core, 200, leader=2, epoch=0)
    assert (core.cluster.leader_of("t", 0), core.cluster.leader_epoch_of("t", 0)) == (2, 0)


def test_list_offsets_refused_for_a_lagging_leader_is_asked_again_later():
    core = make(epoch=4, auto_offset_reset="latest")
    lookup = only(core.poll(0), list_offsets)
    core.on_response(lookup, offsets_answer(
        lookup, {("t", 0): (int(ErrorCode.OFFSET_NOT_AVAILABLE), -1)}), 1)
    core.raise_pending()
    assert core.position(TP) is None
    requests = core.poll(2)
    assert not [r for r in requests if r.api is list_offsets]
    refresh(core, 3, leader=1, epoch=4, requests=requests)
    lookup = only(core.poll(200), list_offsets)
    core.on_response(lookup, offsets_answer(lookup, {("t", 0): 42}), 201)
    assert core.position(TP) == 42
    batch = build_batch([(1000, None, b"v", [])], base_offset=42)
    request = only(core.poll(201), fetch)
    core.on_response(request, fetch_answer(request, {("t", 0): batch}), 202)
    assert [r.offset for r in core.take_chunk()[1]] == [42]


# position validation after a leader change (OffsetForLeaderEpoch) ---------------------------


def epoch_answer(request, end_offset: int, epoch: int, error: int = 0):
    (topic,) = request.body.topics
    return offset_for_leader_epoch.Response(throttle_time_ms=0, topics=[
        offset_for_leader_epoch.OffsetForLeaderTopicResult(topic=topic.topic, partitions=[
            offset_for_leader_epoch.EpochEndOffset(error_code=error, partition=p.partition,
                                                   leader_epoch=epoch, end_offset=end_offset)
            for p in topic.partitions])])


def fetched_in_epoch_4(**options) -> ConsumerProtocol:
    """A consumer that read offsets 0-9 (batches of epoch 4) from leader 1, then learned
    that node 2 leads in epoch 5."""
    core = make(leader=1, epoch=4, **options)
    core.seek(TP, 0)
    request = only(core.poll(0), fetch)
    data = build_batch([(1000 + i, None, b"v%d" % i, []) for i in range(10)], base_offset=0,
                       partition_leader_epoch=4)
    core.on_response(request, fetch_answer(request, {("t", 0): data}), 1)
    assert [r.offset for r in core.take_chunk()[1]] == list(range(10))
    core.cluster.mark_stale()
    requests = core.poll(2)  # the next fetch goes to node 1, which then loses the lead
    refresh(core, 2, leader=2, epoch=5, requests=requests)
    request = only(requests, fetch)
    core.on_response(request, fetch_answer(request, {}, error=int(
        ErrorCode.NOT_LEADER_OR_FOLLOWER)), 2)
    return core


def test_after_a_leader_change_the_position_is_validated_before_fetching():
    core = fetched_in_epoch_4()
    requests = core.poll(3)
    assert not [r for r in requests if r.api is fetch]
    check = only(requests, offset_for_leader_epoch)
    part = check.body.topics[0].partitions[0]
    assert (check.node, part.leader_epoch, part.current_leader_epoch) == (2, 4, 5)
    assert check.body.replica_id == -1
    core.on_response(check, epoch_answer(check, end_offset=10, epoch=4), 4)
    request = only(core.poll(4), fetch)
    part = request.body.topics[0].partitions[0]
    assert (request.node, part.fetch_offset, part.current_leader_epoch) == (2, 10, 5)
    assert not [r for r in core.poll(5) if r.api is offset_for_leader_epoch]  # validated once


def test_a_truncation_below_the_position_moves_it_back_with_a_warning(caplog):
    core = fetched_in_epoch_4(auto_offset_reset="earliest")
    check = only(core.poll(3), offset_for_leader_epoch)
    core.on_response(check, epoch_answer(check, end_offset=7, epoch=4), 4)
    assert core.position(TP) == 7
    assert "diverges from ours at 7" in caplog.text
    request = only(core.poll(4), fetch)
    assert request.body.topics[0].partitions[0].fetch_offset == 7


def test_an_unknown_epoch_resets_the_position_by_the_policy():
    core = fetched_in_epoch_4(auto_offset_reset="earliest")
    check = only(core.poll(3), offset_for_leader_epoch)
    core.on_response(check, epoch_answer(check, end_offset=-1, epoch=-1), 4)
    lookup = only(core.poll(4), list_offsets)
    assert lookup.body.topics[0].partitions[0].timestamp == -2


def test_a_truncation_without_a_reset_policy_is_raised():
    core = fetched_in_epoch_4(auto_offset_reset="none")
    check = only(core.poll(3), offset_for_leader_epoch)
    core.on_response(check, epoch_answer(check, end_offset=7, epoch=4), 4)
    with pytest.raises(LogTruncationError) as raised:
        core.raise_pending()
    assert raised.value.divergent_offset == 7 and core.position(TP) == 10


def test_a_fenced_validation_is_asked_again_after_a_refresh():
    core = fetched_in_epoch_4()
    first = core.poll(3)
    check = only(first, offset_for_leader_epoch)
    core.on_response(check, epoch_answer(check, -1, -1, int(ErrorCode.FENCED_LEADER_EPOCH)), 4)
    core.raise_pending()
    assert not [r for r in core.poll(5) if r.api in (fetch, offset_for_leader_epoch)]
    refresh(core, 5, leader=2, epoch=6, requests=first)  # the refresh asked for meanwhile
    check = only(core.poll(200), offset_for_leader_epoch)
    assert check.body.topics[0].partitions[0].current_leader_epoch == 6
    core.on_response(check, epoch_answer(check, end_offset=12, epoch=4), 201)
    assert only(core.poll(201), fetch).body.topics[0].partitions[0].fetch_offset == 10


def test_a_seek_needs_no_validation():
    core = fetched_in_epoch_4()
    core.seek(TP, 3)
    requests = core.poll(3)
    assert not [r for r in requests if r.api is offset_for_leader_epoch]
    assert only(requests, fetch).body.topics[0].partitions[0].fetch_offset == 3
