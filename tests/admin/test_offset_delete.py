"""OffsetDelete v0 (KIP-496) with kafka-python's admin, as Kafka answers it: an empty group's
offsets go; a live consumer group keeps the offsets of topics it is subscribed to
(GROUP_SUBSCRIBED_TO_TOPIC) and loses the others; an unknown group is GROUP_ID_NOT_FOUND; an
unknown partition UNKNOWN_TOPIC_OR_PARTITION. One two-worker appliance (group_appliance)."""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupIdNotFoundError, NoError

import klog
from tests.conftest import topic_maker
from tests.polling import wait_until

_groups = itertools.count()


@pytest.fixture(scope="module")
def make_topic(group_appliance):
    return topic_maker(group_appliance.bootstrap, partitions=1, prefix="od")


@pytest.fixture(scope="module")
def admin(group_appliance):
    client = KafkaAdminClient(bootstrap_servers=group_appliance.bootstrap)
    yield client
    client.close()


def commit(appliance, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for `group` as a consumer that assigns partitions itself (the group
    stays empty: no member)."""
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def committed(admin, group: str) -> dict[tuple[str, int], int]:
    """What the coordinator holds now (klog's own admin reads it)."""
    bootstrap = admin.config["bootstrap_servers"]
    with klog.Admin(bootstrap if isinstance(bootstrap, str) else bootstrap[0]) as ours:
        return {(tp.topic, tp.partition): offset
                for tp, offset in ours.list_group_offsets(group).items() if offset is not None}


def test_an_empty_groups_offsets_go(group_appliance, admin, make_topic):
    a, b = make_topic(), make_topic()
    group = f"od-{next(_groups)}"
    commit(group_appliance, group, {(a, 0): 5, (b, 0): 3})
    result = admin.delete_group_offsets(group, [KTopicPartition(a, 0)])
    assert result == {KTopicPartition(a, 0): NoError}
    assert committed(admin, group) == {(b, 0): 3}
    # a partition without an offset answers NONE as well
    assert admin.delete_group_offsets(group, [KTopicPartition(a, 0)]) == \
        {KTopicPartition(a, 0): NoError}


def test_a_live_group_keeps_the_offsets_of_topics_it_consumes(group_appliance, admin,
                                                              make_topic):
    consumed, other = make_topic(), make_topic()
    group = f"od-{next(_groups)}"
    commit(group_appliance, group, {(consumed, 0): 4, (other, 0): 2})
    member = Consumer({"bootstrap.servers": group_appliance.bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        member.subscribe([consumed])
        wait_until(lambda: member.poll(0.2) is None and bool(member.assignment()), 30,
                   "the member's assignment")
        result = admin.delete_group_offsets(
            group, [KTopicPartition(consumed, 0), KTopicPartition(other, 0)])
        assert result[KTopicPartition(consumed, 0)].errno == 86  # GROUP_SUBSCRIBED_TO_TOPIC
        assert result[KTopicPartition(other, 0)] is NoError
        assert committed(admin, group) == {(consumed, 0): 4}
    finally:
        member.close()


def test_unknown_group_and_unknown_partition(group_appliance, admin, make_topic):
    topic = make_topic()
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets(f"od-none-{next(_groups)}", [KTopicPartition(topic, 0)])
    group = f"od-{next(_groups)}"
    commit(group_appliance, group, {(topic, 0): 1})
    result = admin.delete_group_offsets(group, [KTopicPartition(topic, 9),
                                                KTopicPartition("od-no-such-topic", 0)])
    assert {tp: e.errno for tp, e in result.items()} == {
        KTopicPartition(topic, 9): 3, KTopicPartition("od-no-such-topic", 0): 3}
    assert committed(admin, group) == {(topic, 0): 1}
