"""DeleteRecords with real admin clients (issue 25): confluent-kafka's, kafka-python's and
aiokafka's admin delete records before an offset; consumers from the beginning start there,
older offsets answer OFFSET_OUT_OF_RANGE, a restart keeps the log start; bad input gets
Kafka's error codes and changes nothing. One two-worker appliance for the module."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import OffsetOutOfRangeError

import klog
from klog.errors import KafkaError
from klog.protocol.apis import delete_records, fetch
from klog.protocol.error_codes import ErrorCode
from klog.wire import BrokerConnection
from tests.conftest import running_appliance

RECORDS = 100
_names = itertools.count()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("records"), log_dirs=2) as started:
        yield started


def filled_topic(appliance, partitions: int = 2) -> str:
    """A topic of small segments (so deletions remove files), RECORDS records per partition."""
    name = f"records-{next(_names)}"
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(name, partitions, configs={"segment.bytes": "2048"})
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 0})
    for p in range(partitions):
        for i in range(RECORDS):
            producer.produce(name, value=f"{p}-{i}".encode() * 8, partition=p)
            if i % 10 == 9:
                producer.flush(10)
    assert producer.flush(10) == 0
    return name


def first_offset_from_beginning(appliance, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
        while True:
            message = consumer.poll(10)
            assert message is not None, "nothing consumed"
            if message.error() is None:
                return message.offset()
    finally:
        consumer.close()


def earliest(appliance, topic: str) -> dict[int, int]:
    with klog.Admin(appliance.bootstrap) as admin:
        return admin.list_offsets(topic, klog.admin.EARLIEST)


def delete(appliance, topic: str, partition: int, offset: int) -> int | KafkaError:
    """klog's admin DeleteRecords (on the partition's leader): the low watermark or the error."""
    with klog.Admin(appliance.bootstrap) as admin:
        return admin.delete_records({klog.TopicPartition(topic, partition): offset}).popitem()[1]


def raw_delete(appliance, topic: str, partition: int, offset: int, worker: int = 0):
    """One DeleteRecords straight to a worker, whatever the metadata says: the broker's own
    answer for partitions the admin clients would refuse before asking."""
    conn = BrokerConnection("127.0.0.1", appliance.ports()[worker], client_id="test",
                            timeout_s=10)
    try:
        answer = conn.call(delete_records, timeout_ms=5000, topics=[
            delete_records.DeleteRecordsTopic(name=topic, partitions=[
                delete_records.DeleteRecordsPartition(partition_index=partition,
                                                      offset=offset)])])
    finally:
        conn.close()
    return answer.topics[0].partitions[0]


def test_confluent_deletes_records_before_an_offset(appliance):
    topic = filled_topic(appliance)
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 40), TopicPartition(topic, 1, 7)])
    results = {tp.partition: f.result(timeout=30) for tp, f in futures.items()}
    assert results[0].low_watermark == 40 and results[1].low_watermark == 7
    assert earliest(appliance, topic) == {0: 40, 1: 7}
    assert first_offset_from_beginning(appliance, topic, 0) == 40
    assert first_offset_from_beginning(appliance, topic, 1) == 7


def test_older_offsets_answer_offset_out_of_range(appliance):
    topic = filled_topic(appliance, partitions=1)
    assert delete(appliance, topic, 0, 60) == 60
    consumer = KafkaConsumer(bootstrap_servers=appliance.bootstrap, auto_offset_reset="none",
                             enable_auto_commit=False, group_id=None)
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 10)
        with pytest.raises(OffsetOutOfRangeError):
            for _ in range(50):
                consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    for port in appliance.ports():  # the owner and a worker reading its published state
        conn = BrokerConnection("127.0.0.1", port, client_id="test", timeout_s=10)
        try:
            answer = conn.call(fetch, replica_id=-1, max_wait_ms=0, min_bytes=1,
                               max_bytes=1 << 20, isolation_level=0, session_id=0,
                               session_epoch=-1, forgotten_topics_data=[], rack_id="",
                               topics=[fetch.FetchTopic(topic=topic, partitions=[
                                   fetch.FetchPartition(partition=0, fetch_offset=59,
                                                        log_start_offset=-1,
                                                        partition_max_bytes=1 << 20)])])
        finally:
            conn.close()
        part = answer.responses[0].partitions[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, port
        assert part.log_start_offset == 60


def test_kafka_python_deletes_records(appliance):
    topic = filled_topic(appliance)
    admin = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    try:
        result = admin.delete_records({KTopicPartition(topic, 0): 25,
                                       KTopicPartition(topic, 1): -1})  # -1: the high watermark
    finally:
        admin.close()
    lows = {tp.partition: r["low_watermark"] for tp, r in result.items()}
    assert lows == {0: 25, 1: RECORDS}
    assert earliest(appliance, topic) == {0: 25, 1: RECORDS}
    assert first_offset_from_beginning(appliance, topic, 0) == 25


def test_aiokafka_deletes_records(appliance):
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic = filled_topic(appliance, partitions=1)

    async def delete():
        admin = AIOKafkaAdminClient(bootstrap_servers=appliance.bootstrap)
        await admin.start()
        try:
            return await admin.delete_records({ATopicPartition(topic, 0): RecordsToDelete(33)})
        finally:
            await admin.close()

    result = asyncio.run(delete())
    assert list(result.values()) == [33]
    assert first_offset_from_beginning(appliance, topic, 0) == 33


def test_bad_input_gets_kafkas_errors_and_changes_nothing(appliance):
    topic = filled_topic(appliance, partitions=1)
    assert delete(appliance, topic, 0, 10) == 10
    assert delete(appliance, topic, 0, RECORDS + 1).code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert delete(appliance, topic, 0, -2).code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert delete(appliance, topic, 0, 5) == 10  # below the start: nothing changes
    assert earliest(appliance, topic) == {0: 10}
    unknown = raw_delete(appliance, "no-such-topic", 0, 1)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert raw_delete(appliance, topic, 7, 1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert delete(appliance, topic, 7, 1).code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # only the leader deletes; the other worker sends the client there
    answers = sorted(raw_delete(appliance, topic, 0, 50, worker=w).error_code for w in (0, 1))
    assert answers == [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER]
    compacted = f"records-{next(_names)}"
    with klog.Admin(appliance.bootstrap) as ours:
        ours.create_topic(compacted, 1, configs={"cleanup.policy": "compact"})
    assert delete(appliance, compacted, 0, -1).code == ErrorCode.POLICY_VIOLATION  # Kafka's
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})
    future = admin.delete_records([TopicPartition(topic, 0, RECORDS + 5)])[
        TopicPartition(topic, 0, RECORDS + 5)]
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|out of range"):
        future.result(timeout=30)
    assert earliest(appliance, topic) == {0: 50}
    # the worker keeps serving
    assert first_offset_from_beginning(appliance, topic, 0) == 50


def test_a_restart_keeps_the_log_start(appliance):
    topic = filled_topic(appliance)
    assert delete(appliance, topic, 0, 55) == 55
    assert delete(appliance, topic, 1, 3) == 3
    appliance.stop()
    appliance.start()
    assert earliest(appliance, topic) == {0: 55, 1: 3}
    assert first_offset_from_beginning(appliance, topic, 0) == 55


def test_list_offsets_max_timestamp_kip_734(appliance):
    """ListOffsets v7+ with timestamp -3: the offset and timestamp of the record with the
    largest timestamp (the first of equals), below the high watermark, after a DeleteRecords."""
    from confluent_kafka.admin import OffsetSpec

    topic = f"records-{next(_names)}"
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(topic, 1, configs={"segment.bytes": "2048"})
    base = int(time.time() * 1000) - 60_000  # recent: retention.ms keeps it
    stamps = [base + i for i in range(60)]
    stamps[23] = base + 10_000  # the largest, in the middle of a segment and of the log
    stamps[41] = base + 10_000  # an equal one later: the first wins
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 0})
    for i, stamp in enumerate(stamps):
        producer.produce(topic, value=b"x" * 64, partition=0, timestamp=stamp)
        if i % 7 == 6:
            producer.flush(10)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": appliance.bootstrap})

    def max_timestamp():
        tp = TopicPartition(topic, 0)
        return admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)

    found = max_timestamp()
    assert (found.offset, found.timestamp) == (23, base + 10_000)
    assert delete(appliance, topic, 0, 30) == 30  # the first one goes
    found = max_timestamp()
    assert (found.offset, found.timestamp) == (41, base + 10_000)
    with klog.Admin(appliance.bootstrap) as ours:  # v8's EARLIEST_LOCAL (KIP-405): the start
        assert ours.list_offsets(topic, -4) == {0: 30}
    kp = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    try:
        from kafka.admin import OffsetSpec as KOffsetSpec
        answer = kp.list_partition_offsets({KTopicPartition(topic, 0): KOffsetSpec.MAX_TIMESTAMP})
    finally:
        kp.close()
    (info,) = answer.values()
    assert info.offset == 41
