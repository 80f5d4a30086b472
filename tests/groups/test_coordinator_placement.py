"""Where a group's coordinator is, asked while ``__consumer_offsets`` does not exist yet.

In a fleet, two appliances asked at once both create the topic; the one that loses the race
hears TOPIC_ALREADY_EXISTS before the fleet's view has the topic. FindCoordinator must then
answer the retriable COORDINATOR_NOT_AVAILABLE: it failed with an AttributeError (an
UNKNOWN_SERVER_ERROR to the client and a traceback in the log, seen in tests/faults). The
race is made deterministic here with a controller that has lost it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from appliance.control.topics import TopicResult
from appliance.workers.groups.coordinator import CoordinatorError, GroupCoordinator
from appliance.workers.groups.offsets_log import OFFSETS_TOPIC
from klog.protocol.error_codes import ErrorCode


class RaceLost:
    """A controller whose fleet (three appliances) created the topic a moment ago, unseen by
    this appliance."""

    fleet_nodes = {100: None, 200: None, 300: None}

    def topic(self, name):
        return None

    def create_topic(self, name, partitions, replication_factor, configs):
        return TopicResult(name, ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")


def test_a_coordinator_not_known_yet_is_not_available_for_now():
    config = SimpleNamespace(group_initial_rebalance_delay_ms=0, group_max_size=10,
                             offsets_topic_num_partitions=4, offsets_topic_segment_bytes=1 << 20,
                             offsets_topic_replication_factor=3)
    coordinator = GroupCoordinator(SimpleNamespace(config=config, control=RaceLost()))
    with pytest.raises(CoordinatorError) as raised:
        coordinator.coordinator_partition("a-group")
    assert raised.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert OFFSETS_TOPIC in str(raised.value)
