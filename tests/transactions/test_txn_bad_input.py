"""Bad input to the transaction APIs, over raw connections: each gets Kafka's error code (or,
for a body that does not decode, INVALID_REQUEST or a closed connection), the worker keeps
serving everyone, and nothing committed is lost.

What tests/transactions/test_coordinator_wire.py already asserts is not repeated here (EndTxn
commit in Empty, a timeout of 900001 ms at v4, AddPartitionsToTxn at v3 for an unknown topic
and partition, an old epoch, an unknown producer id on AddPartitionsToTxn).

The module's appliance has ``transaction.max.timeout.ms=30000`` and no topic auto-creation.
Every test ends with ``still_serving``: a plain confluent-kafka producer writes a record and a
read_committed consumer reads back exactly the records committed so far (a transaction
committed before the bad input first).
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from klog.protocol.apis import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    api_versions,
    describe_transactions,
    end_txn,
    init_producer_id,
    list_transactions,
    metadata,
    produce,
    txn_offset_commit,
    write_txn_markers,
)
from klog.protocol.client import ClientConnection
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    end,
    wait_for_state,
)
from tests.transactions.coordinator_helpers import init as init_at
from tests.worker.raw import RawClient

E = ErrorCode
MAX_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    settings = {**SETTINGS, "auto.create.topics.enable": "false",
                "transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}
    with running_appliance(tmp_path_factory.mktemp("txn-bad"), log_dirs=2,
                           settings=settings) as started:
        yield started


class Committed:
    """The module's topic (2 partitions) and what read_committed must read of partition 0."""

    def __init__(self, appliance):
        self.appliance = appliance
        self.topic = topic_maker(appliance.bootstrap, partitions=2, prefix="txn-bad")()
        self.values: list[str] = []
        p = transactional(appliance, "bad-baseline")
        p.init_transactions(20)
        p.begin_transaction()
        for value in ("kept-0", "kept-1"):
            p.produce(self.topic, value.encode(), partition=0)
        p.commit_transaction(20)
        self.values += ["kept-0", "kept-1"]

    def still_serving(self, label: str) -> None:
        """A plain producer writes; read_committed reads back everything committed."""
        plain = Producer({"bootstrap.servers": self.appliance.bootstrap,
                          "message.timeout.ms": 20_000})
        plain.produce(self.topic, f"plain-{label}".encode(), partition=0)
        assert plain.flush(20) == 0
        self.values.append(f"plain-{label}")
        assert read_committed(self.appliance, self.topic, len(self.values)) == self.values


@pytest.fixture(scope="module")
def committed(appliance):
    return Committed(appliance)


def init(client, transactional_id: str, **fields):
    """InitProducerId with a timeout within this appliance's transaction.max.timeout.ms."""
    return init_at(client, transactional_id, **{"timeout_ms": 10_000, **fields})


def transactional(appliance, transactional_id: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": appliance.bootstrap,
                     "transactional.id": transactional_id, "transaction.timeout.ms": 20_000,
                     "message.timeout.ms": 20_000, "socket.timeout.ms": 10_000, **extra})


def read_committed(appliance, topic: str, count: int, timeout_s: float = 20) -> list[str]:
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "bad-reader",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and len(values) < count:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
        # anything more than expected would show now (a record of an aborted transaction)
        settle = time.monotonic() + 0.3
        while time.monotonic() < settle:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
    finally:
        consumer.close()
    return values


def leader_port(appliance, topic: str, partition: int = 0) -> int:
    probe = RawClient(appliance.port)
    try:
        answer = probe.call(metadata, 1, topics=[metadata.MetadataRequestTopic(name=topic)])
    finally:
        probe.close()
    ports = {b.node_id: b.port for b in answer.brokers}
    (wanted,) = [p for p in answer.topics[0].partitions if p.partition_index == partition]
    return ports[wanted.leader_id]


# -- EndTxn for a producer that never began --------------------------------------------------

def test_end_txn_without_a_transaction(appliance, committed):
    client = coordinator(appliance, "bad-never-began")
    try:
        # an id the coordinator has never seen: no producer id is mapped to it
        for version in (0, 1, 3):
            for commit in (True, False):
                assert end(client, "bad-never-began", 4242, 0, commit, version=version) == \
                    E.INVALID_PRODUCER_ID_MAPPING
        assert describe(client, "bad-never-began").error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        pid = init(client, "bad-never-began")
        # known id, nothing begun: abort is as invalid as commit; a wrong producer id unmapped
        assert end(client, "bad-never-began", pid.producer_id, 0, False) == E.INVALID_TXN_STATE
        assert end(client, "bad-never-began", pid.producer_id + 1, 0, True) == \
            E.INVALID_PRODUCER_ID_MAPPING
        state = describe(client, "bad-never-began")
        assert (state.transaction_state, state.producer_epoch) == ("Empty", 0)
        # a finished commit: EndTxn(commit) again is a retry (NONE), EndTxn(abort) invalid
        assert add_partitions(client, "bad-never-began", pid.producer_id, 0,
                              {committed.topic: [1]}) == {(committed.topic, 1): E.NONE}
        assert end(client, "bad-never-began", pid.producer_id, 0, True) == E.NONE
        assert wait_for_state(client, "bad-never-began", "CompleteCommit").transaction_state \
            == "CompleteCommit"
        assert end(client, "bad-never-began", pid.producer_id, 0, True) == E.NONE
        assert end(client, "bad-never-began", pid.producer_id, 0, False) == E.INVALID_TXN_STATE
        assert describe(client, "bad-never-began").transaction_state == "CompleteCommit"
    finally:
        client.close()
    committed.still_serving("end-txn")


# -- WriteTxnMarkers for an unknown producer --------------------------------------------------

def markers(port: int, topic: str, producer_id: int, commit: bool, partitions=(0,),
            version: int = 1) -> list[tuple[str, int, ErrorCode]]:
    client = RawClient(port)
    try:
        answer = client.call(write_txn_markers, version, markers=[
            write_txn_markers.WritableTxnMarker(
                producer_id=producer_id, producer_epoch=0, transaction_result=commit,
                coordinator_epoch=0, topics=[write_txn_markers.WritableTxnMarkerTopic(
                    name=topic, partition_indexes=list(partitions))])])
    finally:
        client.close()
    return [(t.name, p.partition_index, ErrorCode(p.error_code))
            for m in answer.markers for t in m.topics for p in t.partitions]


def test_markers_for_an_unknown_producer_end_nobody_elses_transaction(appliance, committed):
    """Kafka writes a marker for a producer the partition does not know (a coordinator's
    retry after the producer state expired): NONE, and an open transaction of another
    producer on that partition stays open (read_committed still held at its first offset)."""
    topic = committed.topic
    holder = transactional(appliance, "bad-holder")
    holder.init_transactions(20)
    holder.begin_transaction()
    holder.produce(topic, b"held", partition=0)
    assert holder.flush(20) == 0
    port = leader_port(appliance, topic)
    for version in (0, 1):
        for commit in (True, False):
            assert markers(port, topic, 987_654 + version, commit, version=version) == \
                [(topic, 0, E.NONE)]
    assert markers(port, "bad-no-such-topic", 987_654, True) == \
        [("bad-no-such-topic", 0, E.UNKNOWN_TOPIC_OR_PARTITION)]
    # still held: nothing of the open transaction, nor the plain record after it
    plain = Producer({"bootstrap.servers": appliance.bootstrap})
    plain.produce(topic, b"plain-behind-held", partition=0)
    assert plain.flush(20) == 0
    assert read_committed(appliance, topic, len(committed.values) + 1, timeout_s=1.5) == \
        committed.values
    holder.commit_transaction(20)
    committed.values += ["held", "plain-behind-held"]
    committed.still_serving("markers")


# -- the limits of a transactional id ---------------------------------------------------------

def test_transaction_timeout_outside_kafkas_bounds(appliance, committed):
    client = coordinator(appliance, "bad-timeout")
    try:
        for version in (0, 1, 4):  # aiokafka, KafkaJS, librdkafka / kafka-python
            for timeout_ms in (MAX_TIMEOUT_MS + 1, 0, -1):
                answer = init(client, "bad-timeout", version=version, timeout_ms=timeout_ms)
                assert (answer.error_code, answer.producer_id) == \
                    (E.INVALID_TRANSACTION_TIMEOUT, -1), (version, timeout_ms)
        assert describe(client, "bad-timeout").error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        assert init(client, "bad-timeout", timeout_ms=MAX_TIMEOUT_MS).error_code == E.NONE
    finally:
        client.close()
    # a real client told so: librdkafka's init_transactions fails (fatal: a configuration)
    too_long = transactional(appliance, "bad-timeout-ck", **{"transaction.timeout.ms": 60_000})
    with pytest.raises(KafkaException) as raised:
        too_long.init_transactions(20)
    assert "timeout" in raised.value.args[0].str().lower()
    committed.still_serving("timeout")


def test_an_empty_transactional_id_is_an_invalid_request(appliance, committed):
    """Kafka answers INVALID_REQUEST to each transactional API given an empty id."""
    client = RawClient(appliance.port)
    try:
        for version in (0, 4):
            answer = client.call(init_producer_id, version, **{
                "transactional_id": "", "transaction_timeout_ms": 10_000,
                **({"producer_id": -1, "producer_epoch": -1} if version >= 3 else {})})
            assert answer.error_code == E.INVALID_REQUEST
        for port in committed.appliance.ports():
            other = RawClient(port)
            try:
                assert end(other, "", 1, 0, True) == E.INVALID_REQUEST
                assert add_partitions(other, "", 1, 0, {committed.topic: [0]}) == \
                    {(committed.topic, 0): E.INVALID_REQUEST}
                answer = other.call(add_offsets_to_txn, 0, transactional_id="", producer_id=1,
                                    producer_epoch=0, group_id="g")
                assert answer.error_code == E.INVALID_REQUEST
            finally:
                other.close()
    finally:
        client.close()
    committed.still_serving("empty-id")


def test_a_transactional_id_at_and_over_the_string_limit(appliance, committed):
    """A Kafka string holds at most 32767 bytes: an id of that size works like any other. A
    longer one (only a compact string can carry it) does not parse in Kafka, which closes
    the connection; here it is INVALID_REQUEST (it was an unknown server error: the
    coordinator failed to write it to __transaction_state), never a stored id."""
    longest = "t" * 32767
    client = coordinator(appliance, longest)
    try:
        answer = init(client, longest)
        assert answer.error_code == E.NONE
        assert describe(client, longest).transaction_state == "Empty"
        assert end(client, longest, answer.producer_id, 0, False) == E.INVALID_TXN_STATE
    finally:
        client.close()
    over = "u" * 40_000
    for port in appliance.ports():  # any worker: the id is refused before it is placed
        client = RawClient(port)
        try:
            reply = client.call(init_producer_id, 4, transactional_id=over,
                                transaction_timeout_ms=10_000, producer_id=-1,
                                producer_epoch=-1)
            assert (reply.error_code, reply.producer_id) == (E.INVALID_REQUEST, -1)
            assert end(client, over, 1, 0, True) == E.INVALID_REQUEST
            assert add_partitions(client, over, 1, 0, {committed.topic: [0]}) == \
                {(committed.topic, 0): E.INVALID_REQUEST}
        finally:
            client.close()
    committed.still_serving("id-limit")


# -- AddPartitionsToTxn for an unknown topic, inside an open transaction ----------------------

def test_unknown_topic_in_an_open_transaction_adds_nothing_and_it_still_commits(
        appliance, committed):
    """AddPartitionsToTxn v0 (librdkafka's) naming an unknown topic: that partition
    UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED; the transaction keeps
    its partitions and its records, and commits."""
    topic = committed.topic
    client = coordinator(appliance, "bad-unknown-topic")
    try:
        pid = init(client, "bad-unknown-topic")
        assert add_partitions(client, "bad-unknown-topic", pid.producer_id, 0, {topic: [0]},
                              version=0) == {(topic, 0): E.NONE}
        write_transactional(appliance, topic, pid.producer_id, "in-txn", "bad-unknown-topic")
        assert add_partitions(client, "bad-unknown-topic", pid.producer_id, 0,
                              {topic: [1], "bad-missing": [0, 1]}, version=0) == {
            (topic, 1): E.OPERATION_NOT_ATTEMPTED,
            ("bad-missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
            ("bad-missing", 1): E.UNKNOWN_TOPIC_OR_PARTITION}
        state = describe(client, "bad-unknown-topic")
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        assert end(client, "bad-unknown-topic", pid.producer_id, 0, True, version=0) == E.NONE
        assert wait_for_state(client, "bad-unknown-topic", "CompleteCommit") \
            .transaction_state == "CompleteCommit"
    finally:
        client.close()
    committed.values.append("in-txn")
    committed.still_serving("unknown-topic")


def write_transactional(appliance, topic: str, producer_id: int, value: str,
                        transactional_id: str) -> None:
    batch = build_batch([(int(time.time() * 1000), None, value.encode(), ())],
                        producer_id=producer_id, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    client = RawClient(leader_port(appliance, topic))
    try:
        answer = client.call(produce, 8, transactional_id=transactional_id, acks=-1,
                             timeout_ms=10_000, topic_data=[produce.TopicProduceData(
                                 name=topic, partition_data=[
                                     produce.PartitionProduceData(index=0, records=batch)])])
    finally:
        client.close()
    assert answer.responses[0].partition_responses[0].error_code == E.NONE


# -- bodies that do not decode ----------------------------------------------------------------

TXN_APIS = [init_producer_id, add_partitions_to_txn, add_offsets_to_txn, end_txn,
            write_txn_markers, txn_offset_commit, describe_transactions, list_transactions]


def good_frame(module, version: int) -> bytes:
    fields = {
        "InitProducerId": dict(transactional_id="bad-frame", transaction_timeout_ms=10_000,
                               producer_id=-1, producer_epoch=-1),
        "AddPartitionsToTxn": dict(
            v3_and_below_transactional_id="bad-frame", v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0, v3_and_below_topics=[
                add_partitions_to_txn.AddPartitionsToTxnTopic(name="t", partitions=[0])]),
        "AddOffsetsToTxn": dict(transactional_id="bad-frame", producer_id=1, producer_epoch=0,
                                group_id="g"),
        "EndTxn": dict(transactional_id="bad-frame", producer_id=1, producer_epoch=0,
                       committed=True),
        "WriteTxnMarkers": dict(markers=[write_txn_markers.WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[write_txn_markers.WritableTxnMarkerTopic(name="t",
                                                             partition_indexes=[0])])]),
        "TxnOffsetCommit": dict(
            transactional_id="bad-frame", group_id="g", producer_id=1, producer_epoch=0,
            topics=[txn_offset_commit.TxnOffsetCommitRequestTopic(name="t", partitions=[
                txn_offset_commit.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_metadata="")])]),
        "DescribeTransactions": dict(transactional_ids=["bad-frame"]),
        "ListTransactions": dict(state_filters=["Ongoing"], producer_id_filters=[1]),
    }[module.SPEC.name]
    _, data = ClientConnection(client_id="bad").send_request(
        module.SPEC.key, version, module.Request(**fields))
    return data


def mangled(data: bytes) -> list[bytes]:
    """The frame cut short, with bytes left over, and with its body's strings lying about
    their length; each re-framed with a size prefix that matches."""
    payload = data[4:]
    header_end = 4 + 2 + 2 + 4 + 2 + len(b"bad")  # size, key, version, correlation, client id
    body_start = header_end - 4
    out = [payload[:body_start + max(1, (len(payload) - body_start) // 2)],
           payload + b"\x00\x01\x02",
           payload[:body_start] + b"\x7f\xff" + payload[body_start + 2:],
           payload[:body_start] + b"\xff" * (len(payload) - body_start)]
    return [struct.pack(">i", len(p)) + p for p in out]


def answer_or_close(port: int, data: bytes) -> bytes:
    """The answer's frame (b"" if the worker closed the connection or stayed silent)."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
                if len(received) >= 4 and \
                        len(received) >= 4 + struct.unpack_from(">i", received)[0]:
                    break
        except (TimeoutError, ConnectionResetError):
            pass
        return received


def test_bodies_that_do_not_decode(appliance, committed):
    """Each transactional API, at its lowest and highest version, mangled four ways, at both
    workers, while a real transaction is open: the worker answers or closes, a bystander
    connection is served all along, and the open transaction commits afterwards."""
    open_txn = transactional(appliance, "bad-frames-open")
    open_txn.init_transactions(20)
    open_txn.begin_transaction()
    open_txn.produce(committed.topic, b"open-during-garbage", partition=0)
    assert open_txn.flush(20) == 0
    bystanders = [RawClient(port) for port in appliance.ports()]
    answered = set()
    try:
        for module in TXN_APIS:
            for version in module.SPEC.served:  # the lowest and the highest
                for data in mangled(good_frame(module, version)):
                    for port in appliance.ports():
                        reply = answer_or_close(port, data)
                        assert appliance.process.poll() is None, "the appliance died"
                        if reply:  # answered: the error for a body that does not decode
                            answered.add(module.SPEC.name)
                            assert error_of(module, version, reply) == E.INVALID_REQUEST, \
                                (module.SPEC.name, version, data)
            for bystander in bystanders:
                assert bystander.call(api_versions, 0).error_code == 0
    finally:
        for bystander in bystanders:
            bystander.close()
    # the APIs with a top-level error code answer it (AddPartitionsToTxn at v4+, KIP-890's
    # broker form); the others' connections are closed
    assert answered == {"AddOffsetsToTxn", "AddPartitionsToTxn", "EndTxn", "InitProducerId",
                        "ListTransactions"}
    open_txn.commit_transaction(20)
    committed.values.append("open-during-garbage")
    committed.still_serving("frames")


def error_of(module, version: int, reply: bytes) -> ErrorCode:
    """The error an answer carries: the top-level code, or the first partition's."""
    codec = ClientConnection(client_id="bad")
    codec.send_request(module.SPEC.key, version, module.Request())
    codec.receive_data(reply)
    _, body = codec.next_response()
    if hasattr(body, "error_code"):
        return ErrorCode(body.error_code)
    if module is write_txn_markers:
        return ErrorCode(body.markers[0].topics[0].partitions[0].error_code)
    results = body.results_by_topic_v3_and_below
    return ErrorCode(results[0].results_by_partition[0].partition_error_code)
