"""klog.Admin's group calls against a real two-worker appliance (two coordinators), with
members from real confluent-kafka consumers."""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest
from confluent_kafka import Consumer

import klog
from klog import TopicPartition
from klog.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError

_names = itertools.count()


@pytest.fixture(scope="module")
def appliance(group_appliance):
    return group_appliance


@pytest.fixture
def admin(appliance):
    with klog.Admin(appliance.bootstrap) as client:
        yield client


@pytest.fixture
def topic(admin):
    name = f"admin-groups-{next(_names)}"
    admin.create_topic(name, 3)
    return name


def group_on(admin, node: int) -> str:
    """A fresh group id coordinated by ``node`` (DescribeGroups names the coordinator even for
    a group nobody knows, which it reports as Dead)."""
    for _ in range(200):
        name = f"admin-group-{next(_names)}"
        described = admin.describe_groups([name])[name]
        assert described.state == "Dead" and described.members == ()
        if described.coordinator == node:
            return name
    raise AssertionError(f"no group id lands on node {node}")


def test_an_admin_commit_makes_an_empty_group_and_reads_back(admin, topic):
    group = group_on(admin, 0)
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 5})
    assert admin.list_group_offsets(group) == {TopicPartition(topic, 0): 3,
                                               TopicPartition(topic, 1): 5}
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 2)]
    assert admin.list_group_offsets(group, wanted) == {TopicPartition(topic, 0): 3,
                                                       TopicPartition(topic, 2): None}
    described = admin.describe_groups([group])[group]
    assert (described.state, described.members, described.coordinator) == ("Empty", (), 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.alter_group_offsets(group, {TopicPartition(topic, 9): 1})


def test_list_groups_asks_every_node(admin, topic):
    on = {node: group_on(admin, node) for node in (0, 1)}
    for group in on.values():
        admin.alter_group_offsets(group, {TopicPartition(topic, 0): 1})
    listed = {g.group_id: g.coordinator for g in admin.list_groups()}
    assert {listed.get(group) for group in on.values()} == {0, 1}
    assert all(listed[group] == node for node, group in on.items())


def test_members_are_described_and_block_changes(admin, appliance, topic):
    group = group_on(admin, 1)
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                         "client.id": "admin-test", "session.timeout.ms": 6000,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        described = admin.describe_groups([group])[group]
        assert (described.state, described.protocol_type) == ("Stable", "consumer")
        (member,) = described.members
        assert member.client_id == "admin-test" and member.subscription == (topic,)
        assert member.assignment == tuple(TopicPartition(topic, p) for p in range(3))
        assert set(described.assigned) == set(member.assignment)

        with pytest.raises(KafkaError) as refused:
            admin.alter_group_offsets(group, {TopicPartition(topic, 0): 0})
        assert refused.value.code == ErrorCode.NON_EMPTY_GROUP
        (error,) = admin.delete_groups([group]).values()
        assert error is not None and error.code == ErrorCode.NON_EMPTY_GROUP
    finally:
        consumer.close()
    assert admin.delete_groups([group]) == {group: None}
    (error,) = admin.delete_groups([group]).values()
    assert error.code == ErrorCode.GROUP_ID_NOT_FOUND
    assert admin.list_group_offsets(group) == {}


def test_calls_wait_for_a_coordinator_that_restarts(admin, appliance, topic):
    group = group_on(admin, 1)
    admin.alter_group_offsets(group, {TopicPartition(topic, 2): 7})
    os.kill(appliance.worker_pid(1), signal.SIGKILL)
    # FindCoordinator answers COORDINATOR_NOT_AVAILABLE until worker 1 is back and has
    # reloaded its groups; the Admin's old connection to it is broken: both are retried.
    assert admin.list_group_offsets(group) == {TopicPartition(topic, 2): 7}
