"""The pure decision behind KIP-320 on a consumer's Fetch and ListOffsets (consumer_fencing.py):
the epoch check first, then whether this appliance's replica leads."""

from __future__ import annotations

import pytest

from appliance.control.topics import PartitionLeadership, TopicInfo
from appliance.workers.consumer_fencing import consumer_refusal
from klog.protocol.error_codes import ErrorCode


def node_id_of(worker_index: int) -> int:  # appliance 2: nodes 200, 201
    return 200 + worker_index


def topic(leader: int, epoch: int = 5, owner: int = 1) -> TopicInfo:
    return TopicInfo("t", (owner,), leadership=(
        PartitionLeadership(leader, epoch, (201, 301, 101), (201, 301, 101)),))


@pytest.mark.parametrize(("asked", "answer"), [
    (-1, None), (5, None),
    (4, ErrorCode.FENCED_LEADER_EPOCH), (6, ErrorCode.UNKNOWN_LEADER_EPOCH),
])
def test_the_leaders_appliance_checks_the_epoch(asked, answer):
    assert consumer_refusal(topic(201), 0, asked, node_id_of) == answer


@pytest.mark.parametrize(("info", "answer"), [
    (topic(301), ErrorCode.NOT_LEADER_OR_FOLLOWER),  # a follower here
    (topic(-1), ErrorCode.NOT_LEADER_OR_FOLLOWER),  # offline
    (topic(201, owner=-1), ErrorCode.NOT_LEADER_OR_FOLLOWER),  # no replica here at all
    (TopicInfo("t", (1,)), None),  # an appliance that runs alone: as before
    (None, None),  # unknown topic: the caller answers it
])
def test_only_the_leaders_appliance_serves_consumers(info, answer):
    assert consumer_refusal(info, 0, -1, node_id_of) == answer


def test_an_old_epoch_is_fenced_even_at_a_follower():
    assert consumer_refusal(topic(301), 0, 4, node_id_of) == ErrorCode.FENCED_LEADER_EPOCH
    assert consumer_refusal(topic(201), 3, -1, node_id_of) is None  # no such partition
