"""Transactions on a real appliance, without a transaction coordinator: klog's protocol client
plays the producer (InitProducerId for an idempotent id, then Produce of batches flagged
isTransactional) and the coordinator (WriteTxnMarkers sent straight to the partition's
leader). Real consumers read the partition: confluent-kafka, kafka-python and aiokafka in
read_committed (the aborted transaction invisible, the open one holding them at the last
stable offset until its COMMIT, the committed ones visible) and read_uncommitted (everything
visible); ListOffsets both ways; a raw read_committed Fetch at either worker of the appliance
(the owner, and the other through shm and the .txnindex files) answers the same LSO and the
aborted transaction.

With no coordinator, KIP-890's verification (a transactional batch may start a transaction
only once the coordinator confirms it) would refuse these batches: it is off here
(`transaction.partition.verification.enable=false`); tests/transactions/
test_kip890_verification.py covers it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from klog.protocol.apis import (
    fetch,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    write_txn_markers,
)
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch, decode_batches
from tests.conftest import running_appliance, topic_maker
from tests.worker.raw import RawClient

COMMIT, ABORT = True, False
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("txn"), log_dirs=2, settings={
            "transaction.partition.verification.enable": "false"}) as started:
        yield started


class Writer:
    """The producer and the coordinator, over raw connections to the partition's leader."""

    def __init__(self, appliance, topic: str):
        self.topic = topic
        probe = RawClient(appliance.port)
        try:
            answer = probe.call(metadata, 1, topics=[metadata.MetadataRequestTopic(name=topic)])
        finally:
            probe.close()
        ports = {b.node_id: b.port for b in answer.brokers}
        self.leader_port = ports[answer.topics[0].partitions[0].leader_id]
        self.other_port = next(p for p in appliance.ports() if p != self.leader_port)
        self.client = RawClient(self.leader_port)
        self.sequences = {}

    def producer(self) -> tuple[int, int]:
        answer = self.client.call(init_producer_id, 1, transactional_id=None,
                                  transaction_timeout_ms=60_000)
        assert answer.error_code == 0
        self.sequences[answer.producer_id] = 0
        return answer.producer_id, answer.producer_epoch

    def send(self, values, producer=None, *, transactional_id=None) -> int:
        """Append `values` in one batch (transactional when from `producer`); its offset."""
        records = [(int(time.time() * 1000), None, v.encode(), ()) for v in values]
        if producer is None:
            batch = build_batch(records)
        else:
            pid, epoch = producer
            batch = build_batch(records, producer_id=pid, producer_epoch=epoch,
                                base_sequence=self.sequences[pid], is_transactional=True)
            self.sequences[pid] += len(values)
        answer = self.client.call(produce, 8, transactional_id=transactional_id, acks=-1,
                                  timeout_ms=10_000, topic_data=[produce.TopicProduceData(
                                      name=self.topic, partition_data=[
                                          produce.PartitionProduceData(index=0, records=batch)])])
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == 0, ErrorCode(part.error_code)
        return part.base_offset

    def marker(self, producer, commit: bool, *, coordinator_epoch=0, version=1,
               partitions=(0,)) -> list[int]:
        pid, epoch = producer
        answer = self.client.call(write_txn_markers, version, markers=[
            write_txn_markers.WritableTxnMarker(
                producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch, topics=[
                    write_txn_markers.WritableTxnMarkerTopic(
                        name=self.topic, partition_indexes=list(partitions))])])
        assert answer.markers[0].producer_id == pid
        return [p.error_code for p in answer.markers[0].topics[0].partitions]

    def latest(self, isolation_level: int) -> int:
        answer = self.client.call(list_offsets, 5, replica_id=-1,
                                  isolation_level=isolation_level, topics=[
                                      list_offsets.ListOffsetsTopic(name=self.topic, partitions=[
                                          list_offsets.ListOffsetsPartition(
                                              partition_index=0, timestamp=-1)])])
        part = answer.topics[0].partitions[0]
        assert part.error_code == 0
        return part.offset

    def raw_fetch(self, port: int, isolation_level: int):
        client = RawClient(port)
        try:
            answer = client.call(fetch, 11, replica_id=-1, max_wait_ms=0, min_bytes=0,
                                 max_bytes=1 << 20, isolation_level=isolation_level,
                                 topics=[fetch.FetchTopic(topic=self.topic, partitions=[
                                     fetch.FetchPartition(partition=0, fetch_offset=0,
                                                          partition_max_bytes=1 << 20)])],
                                 forgotten_topics_data=[])
        finally:
            client.close()
        return answer.responses[0].partitions[0]

    def close(self):
        self.client.close()


@pytest.fixture(scope="module")
def scenario(appliance):
    """One partition: p0 p1 | A: a0 a1 ABORT | B: b0 b1 COMMIT | p2 | C: c0 (open) | p3."""
    topic = topic_maker(appliance.bootstrap, prefix="txn")()
    writer = Writer(appliance, topic)
    a, b, c = writer.producer(), writer.producer(), writer.producer()
    writer.send(["p0", "p1"])
    writer.send(["a0", "a1"], a)
    writer.send(["b0"], b)
    writer.send(["b1"], b)
    assert writer.marker(a, ABORT) == [0]
    assert writer.marker(b, COMMIT, version=0) == [0]
    writer.send(["p2"])
    c_first = writer.send(["c0"], c, transactional_id="txn-c")
    writer.send(["p3"])
    yield writer, c, c_first
    writer.close()


COMMITTED = ["p0", "p1", "b0", "b1", "p2"]
EVERYTHING = ["p0", "p1", "a0", "a1", "b0", "b1", "p2", "c0", "p3"]


def consume(client: str, bootstrap: str, topic: str, isolation: str, count: int,
            settle_s: float = 2.0) -> list[str]:
    """Values read from the start of partition 0 until `count` arrived, then `settle_s` more
    (nothing further may come)."""
    if client == "confluent":
        return _confluent(bootstrap, topic, isolation, count, settle_s)
    if client == "kafka-python":
        return _kafka_python(bootstrap, topic, isolation, count, settle_s)
    return asyncio.run(_aiokafka(bootstrap, topic, isolation, count, settle_s))


def _confluent(bootstrap, topic, isolation, count, settle_s):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
            if len(values) >= count:
                deadline = min(deadline, time.monotonic() + settle_s)
    finally:
        consumer.close()
    return values


def _kafka_python(bootstrap, topic, isolation, count, settle_s):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level=isolation)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    values = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                values.extend(r.value.decode() for r in records)
            if len(values) >= count:
                deadline = min(deadline, time.monotonic() + settle_s)
    finally:
        consumer.close()
    return values


async def _aiokafka(bootstrap, topic, isolation, count, settle_s):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level=isolation)
    await consumer.start()
    values = []
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                values.extend(r.value.decode() for r in records)
            if len(values) >= count:
                deadline = min(deadline, time.monotonic() + settle_s)
    finally:
        await consumer.stop()
    return values


def test_list_offsets_answers_the_lso_to_read_committed_and_the_high_watermark_otherwise(
        scenario):
    writer, _, c_first = scenario
    assert writer.latest(0) == 11  # 9 records and 2 markers: the log end
    assert writer.latest(1) == c_first


@pytest.mark.parametrize("port", ["leader", "other"])
def test_any_worker_answers_the_lso_and_the_aborted_transaction(scenario, port):
    writer, _, c_first = scenario
    at = writer.leader_port if port == "leader" else writer.other_port
    committed = writer.raw_fetch(at, 1)
    assert committed.error_code == 0
    assert (committed.high_watermark, committed.last_stable_offset) == (11, c_first)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
        (writer_pid(writer, 0), 2)]
    read = [r for _, recs in decode_batches(bytes(committed.records)) for r in recs]
    assert max(r.offset for r in read) < c_first  # nothing at or past the LSO
    uncommitted = writer.raw_fetch(at, 0)
    assert uncommitted.last_stable_offset == c_first and not uncommitted.aborted_transactions
    read = [r for _, recs in decode_batches(bytes(uncommitted.records)) for r in recs]
    assert max(r.offset for r in read) == 10


def writer_pid(writer, n: int) -> int:
    return sorted(writer.sequences)[n]


@pytest.mark.parametrize("client", CLIENTS)
def test_read_uncommitted_sees_everything(appliance, scenario, client):
    writer, _, _ = scenario
    values = consume(client, appliance.bootstrap, writer.topic, "read_uncommitted",
                     len(EVERYTHING), settle_s=0.5)
    assert values == EVERYTHING


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_skips_the_abort_and_waits_at_the_open_transaction(
        appliance, scenario, client):
    writer, _, _ = scenario
    values = consume(client, appliance.bootstrap, writer.topic, "read_committed",
                     len(COMMITTED))
    assert values == COMMITTED


def test_a_commit_releases_what_the_open_transaction_held(appliance, scenario):
    writer, c, _ = scenario
    assert writer.marker(c, COMMIT, coordinator_epoch=1) == [0]
    assert writer.latest(1) == writer.latest(0) == 12
    for client in CLIENTS:
        values = consume(client, appliance.bootstrap, writer.topic, "read_committed",
                         len(COMMITTED) + 2, settle_s=0.5)
        assert values == COMMITTED + ["c0", "p3"], client


def test_markers_refused_as_kafka_refuses_them(scenario):
    writer, c, _ = scenario
    pid, epoch = c
    assert writer.marker((pid, epoch - 1), ABORT, coordinator_epoch=1) == [
        ErrorCode.INVALID_PRODUCER_EPOCH]
    assert writer.marker(c, ABORT, coordinator_epoch=0) == [
        ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    assert writer.marker(c, ABORT, coordinator_epoch=1, partitions=(7,)) == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    other = RawClient(writer.other_port)
    try:
        answer = other.call(write_txn_markers, 1, markers=[write_txn_markers.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=True, coordinator_epoch=1,
            topics=[write_txn_markers.WritableTxnMarkerTopic(name=writer.topic,
                                                            partition_indexes=[0])])])
    finally:
        other.close()
    assert answer.markers[0].topics[0].partitions[0].error_code == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_restart_after_kill_9_rebuilds_a_lost_txnindex(appliance, scenario):
    """Last in the module: it restarts the appliance."""
    writer, _, _ = scenario
    appliance.kill()
    lost = [p for d in appliance.log_dirs for p in d.glob(f"{writer.topic}-0/*.txnindex")]
    assert len(lost) == 1
    lost[0].unlink()
    appliance.start()
    again = Writer(appliance, writer.topic)
    try:
        for port in (again.leader_port, again.other_port):
            committed = again.raw_fetch(port, 1)
            assert [(t.producer_id, t.first_offset)
                    for t in committed.aborted_transactions] == [(writer_pid(writer, 0), 2)]
    finally:
        again.close()
    assert lost[0].exists()
    values = consume("confluent", appliance.bootstrap, writer.topic, "read_committed",
                     len(COMMITTED) + 2, settle_s=0.5)
    assert values == COMMITTED + ["c0", "p3"]
