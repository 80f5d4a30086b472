"""Which worker coordinates which groups, and what a replicated commit answers: the pure
decisions of ``groups/coordination.py``, over plain data."""

from __future__ import annotations

import pytest

from appliance.control.topics import PartitionLeadership, TopicInfo
from appliance.workers.groups.coordination import (
    ALONE,
    NotEnoughAppliances,
    commit_error,
    coordinator_epoch,
    offsets_replication_factor,
)
from klog.protocol.error_codes import ErrorCode

ALONE_INFO = TopicInfo("__consumer_offsets", owners=(0, 1, 0), internal=True)
FLEET_INFO = TopicInfo("__consumer_offsets", owners=(0, 1, -1), internal=True, leadership=(
    PartitionLeadership(100, 4, (100, 200, 300), (100, 200, 300)),  # led here, worker 0
    PartitionLeadership(201, 2, (201, 101, 301), (201, 101)),  # followed here, worker 1
    PartitionLeadership(301, 0, (301,), (301,)),  # a single copy elsewhere
))


def test_alone_the_owner_coordinates():
    assert coordinator_epoch(ALONE_INFO, 0, worker_index=0, node_id=100, held=True,
                             leading_epoch=None) == ALONE
    assert coordinator_epoch(ALONE_INFO, 1, worker_index=0, node_id=100, held=False,
                             leading_epoch=None) is None
    assert coordinator_epoch(ALONE_INFO, 7, worker_index=0, node_id=100, held=True,
                             leading_epoch=None) is None


def test_in_a_fleet_the_leader_coordinates_once_its_role_leads_in_that_epoch():
    def epoch(partition, node, leading):
        return coordinator_epoch(FLEET_INFO, partition, worker_index=node % 100, node_id=node,
                                 held=True, leading_epoch=leading)
    assert epoch(0, 100, 4) == 4
    assert epoch(0, 100, None) is None  # the controller says so; the role is not taken yet
    assert epoch(0, 100, 3) is None  # still the role of an older epoch
    assert epoch(1, 101, None) is None  # a follower: NOT_COORDINATOR
    assert epoch(2, 301, None) == 0  # a single copy has no role: its leader coordinates
    assert coordinator_epoch(FLEET_INFO, 0, worker_index=0, node_id=100, held=False,
                             leading_epoch=4) is None


def test_the_replication_factor_needs_that_many_live_appliances():
    assert offsets_replication_factor(3, None) == 1  # an appliance alone: one copy
    assert offsets_replication_factor(3, 4) == 3
    assert offsets_replication_factor(1, 1) == 1
    with pytest.raises(NotEnoughAppliances, match="offsets.topic.replication.factor=3.*2 are"):
        offsets_replication_factor(3, 2)


@pytest.mark.parametrize(("append", "answer"), [
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
    (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
])
def test_a_commit_that_is_not_committed_gets_a_retriable_coordinator_error(append, answer):
    assert commit_error(append) == answer
    assert commit_error(append).retriable
