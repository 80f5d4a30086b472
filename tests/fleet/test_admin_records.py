"""DeleteRecords in a fleet of three appliances (one worker each), replication factor 3: the
leader moves its log start and answers once every follower's log start is there too (Kafka's
DelayedDeleteRecords: followers follow from the fetch answer's log_start_offset, and state
theirs in their next fetch), so right after the answer each replica's persisted log start is
the offset and its older segments are gone; an offset beyond the high watermark is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.segments.layout import read_state
from tests.fleet.harness import FleetSpec, led
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "fleet-deleted"
RECORDS = 200
FLEET = FleetSpec("/klog-admin-records", log_dirs=1, settings={
    "default.replication.factor": "3"})


def _replica(appliance) -> Path:
    return Path(appliance.log_dirs[0]) / f"{TOPIC}-0"


def test_replicas_follow_the_leaders_log_start(fleet):
    bootstrap = fleet[0].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "segment.bytes": "4096", "min.insync.replicas": "2"})])[TOPIC].result(30)
    wait_until(lambda: led(bootstrap, TOPIC, 1), 30, "a leader")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 1024})  # each batch fits a segment
    failed = []
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"%05d" % i * 10, partition=0,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and failed == []

    tp = TopicPartition(TOPIC, 0, 120)
    done = admin.delete_records([tp], operation_timeout=20)[tp].result(30)
    assert done.low_watermark == 120
    for appliance in fleet:  # the answer waited for every replica
        replica = _replica(appliance)
        assert read_state(str(replica)).log_start_offset == 120, appliance.bootstrap
        bases = sorted(int(p.stem) for p in replica.glob("*.log"))
        assert 0 < bases[0] <= 120, (appliance.bootstrap, bases)

    beyond = TopicPartition(TOPIC, 0, RECORDS + 10)
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE|out of range"):
        admin.delete_records([beyond], operation_timeout=20)[beyond].result(30)
    assert all(read_state(str(_replica(a))).log_start_offset == 120 for a in fleet)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fleet-deleted",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, -2)])
        message = consumer.poll(15)
        while message is not None and message.error() is not None:
            message = consumer.poll(15)
        assert message is not None and message.offset() == 120
    finally:
        consumer.close()
