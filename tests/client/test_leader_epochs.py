"""KIP-320 in the consumer's sans-IO machine: leader epochs from Metadata go out in Fetch and
ListOffsets, an older Metadata answer does not move a partition back, and the fencing errors
refresh metadata without touching the position."""

from __future__ import annotations

import pytest

from klog.config import ConsumerConfig, build
from klog.consumer.consumer_machine import ConsumerProtocol
from klog.protocol.apis import fetch, list_offsets, metadata
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
