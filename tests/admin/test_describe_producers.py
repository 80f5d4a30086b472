"""DescribeProducers v0 (KIP-664) with kafka-python's admin: the partition leader's producer
state (an idempotent producer's id, epoch, last sequence and timestamp; a transactional one's
open transaction start offset), and Kafka's errors for an unknown partition."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import UnknownTopicOrPartitionError

from tests.conftest import running_appliance, topic_maker


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("producers"), log_dirs=2) as started:
        yield started


@pytest.fixture(scope="module")
def make_topic(appliance):
    return topic_maker(appliance.bootstrap, prefix="dp")


@pytest.fixture(scope="module")
def admin(appliance):
    client = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    yield client
    client.close()


def test_idempotent_and_transactional_producers(appliance, admin, make_topic):
    topic = make_topic()
    before = int(time.time() * 1000)
    idempotent = Producer({"bootstrap.servers": appliance.bootstrap,
                           "enable.idempotence": True, "linger.ms": 0})
    for i in range(5):
        idempotent.produce(topic, value=b"%d" % i, partition=0)
        idempotent.flush(10)
    txn = Producer({"bootstrap.servers": appliance.bootstrap,
                    "transactional.id": f"{topic}-txn", "linger.ms": 0})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, value=b"in a transaction", partition=0)
    assert txn.flush(10) == 0
    try:
        (state,) = admin.describe_producers([KTopicPartition(topic, 0)]).values()
        by_start = sorted(state.active_producers,
                          key=lambda p: p.current_transaction_start_offset)
        plain, open_txn = by_start
        assert plain.current_transaction_start_offset == -1
        assert plain.producer_id >= 0 and plain.producer_epoch >= 0
        assert plain.last_sequence == 4
        assert plain.last_timestamp >= before
        assert open_txn.current_transaction_start_offset == 5
        assert open_txn.producer_id != plain.producer_id
    finally:
        txn.abort_transaction(10)


def test_unknown_partition(appliance, admin, make_topic):
    topic = make_topic()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([KTopicPartition(topic, 3)], broker_id=0)
