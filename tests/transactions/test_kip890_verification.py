"""KIP-890's first part on a real appliance of two workers: a transactional batch that would
start a transaction on a partition is appended only once the transaction coordinator confirms
the partition is in the producer's ongoing transaction.

Every transactional id here is picked so that its coordinator is the other worker than the
partition's leader: the leader asks over the inter-broker listener (AddPartitionsToTxn v4,
``verify_only``), as it would ask another appliance.

- a raw transactional Produce for a partition never added is refused INVALID_TXN_STATE and the
  last stable offset does not move; one from a transactional id the coordinator does not know
  is INVALID_PRODUCER_ID_MAPPING;
- the hanging transaction: a partition added, the transaction aborted (EndTxn), then the
  delayed Produce: refused, and read_committed consumers read what follows;
- a producer fenced by a new InitProducerId (the coordinator aborts with a bumped epoch, whose
  marker lands on the partition): its delayed batch is INVALID_PRODUCER_EPOCH;
- the coordinator's v4/v5 answers on the wire, batched per transactional id, and v4 without
  ``verify_only`` adds;
- confluent-kafka, kafka-python and aiokafka transactions still commit;
- with ``transaction.partition.verification.enable=false`` (a second appliance, started for
  that one test) the old behaviour: the batch is appended and the LSO stays behind it.
"""

from __future__ import annotations

import itertools
import time

import pytest

from klog.protocol.apis import add_partitions_to_txn as aptt
from klog.protocol.apis import find_coordinator, list_offsets, metadata, produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch
from tests.conftest import running_appliance, topic_maker
from tests.transactions.coordinator_helpers import (
    SETTINGS,
    add_partitions,
    coordinator,
    describe,
    end,
    init,
    wait_for_state,
)
from tests.transactions.test_real_clients_txn import WRITERS, Reader
from tests.worker.raw import RawClient

E = ErrorCode
NAMES = itertools.count()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("kip890"), log_dirs=2,
                           settings=SETTINGS) as started:
        yield started


@pytest.fixture(scope="module")
def new_topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=1, prefix="kip890")


def leader_port(appliance, topic: str, partition: int = 0) -> int:
    probe = RawClient(appliance.port)
    try:
        answer = probe.call(metadata, 1, topics=[metadata.MetadataRequestTopic(name=topic)])
    finally:
        probe.close()
    ports = {b.node_id: b.port for b in answer.brokers}
    (wanted,) = [p for p in answer.topics[0].partitions if p.partition_index == partition]
    return ports[wanted.leader_id]


def coordinator_port(appliance, transactional_id: str) -> int:
    probe = RawClient(appliance.port)
    try:
        deadline = time.monotonic() + 20
        while True:
            answer = probe.call(find_coordinator, 2, key=transactional_id, key_type=1)
            if answer.error_code == 0:
                return answer.port
            assert time.monotonic() < deadline, E(answer.error_code)
            time.sleep(0.1)
    finally:
        probe.close()


def remote_id(appliance, topic: str, prefix: str) -> str:
    """A transactional id coordinated by the other worker than the one leading ``topic``."""
    leader = leader_port(appliance, topic)
    for n in NAMES:
        candidate = f"{prefix}-{n}"
        if coordinator_port(appliance, candidate) != leader:
            return candidate
    raise AssertionError("unreachable")


class Partition0:
    """Raw produce and ListOffsets against the leader of ``topic``-0."""

    def __init__(self, appliance, topic: str):
        self.topic = topic
        self.client = RawClient(leader_port(appliance, topic))

    def produce(self, values, *, producer=None, sequence=0, transactional_id=None):
        """One batch (transactional when ``producer`` is (id, epoch)): (error, message)."""
        records = [(int(time.time() * 1000), None, v.encode(), ()) for v in values]
        if producer is None:
            batch = build_batch(records)
        else:
            batch = build_batch(records, producer_id=producer[0], producer_epoch=producer[1],
                                base_sequence=sequence, is_transactional=True)
        answer = self.client.call(produce, 8, transactional_id=transactional_id, acks=-1,
                                  timeout_ms=10_000, topic_data=[produce.TopicProduceData(
                                      name=self.topic, partition_data=[
                                          produce.PartitionProduceData(index=0, records=batch)])])
        part = answer.responses[0].partition_responses[0]
        return E(part.error_code), part.error_message

    def offsets(self) -> tuple[int, int]:
        """(high watermark, last stable offset)."""
        return tuple(self._latest(level) for level in (0, 1))

    def _latest(self, isolation_level: int) -> int:
        answer = self.client.call(list_offsets, 5, replica_id=-1,
                                  isolation_level=isolation_level, topics=[
                                      list_offsets.ListOffsetsTopic(name=self.topic, partitions=[
                                          list_offsets.ListOffsetsPartition(
                                              partition_index=0, timestamp=-1)])])
        part = answer.topics[0].partitions[0]
        assert part.error_code == 0
        return part.offset

    def close(self):
        self.client.close()


@pytest.fixture
def partition0(appliance, new_topic):
    target = Partition0(appliance, new_topic())
    yield target
    target.close()


def begun(appliance, transactional_id: str):
    client = coordinator(appliance, transactional_id)
    answer = init(client, transactional_id)
    assert answer.error_code == 0
    return client, (answer.producer_id, answer.producer_epoch)


def test_a_partition_never_added_is_refused_and_the_lso_stays(appliance, partition0):
    assert partition0.produce(["before"]) == (E.NONE, None)
    txn_id = remote_id(appliance, partition0.topic, "never-added")
    client, producer = begun(appliance, txn_id)
    try:
        before = partition0.offsets()
        assert before[0] == before[1] == 1
        error, message = partition0.produce(["stray"], producer=producer,
                                            transactional_id=txn_id)
        assert (error, message) == (E.INVALID_TXN_STATE,
                                    "Partition was not added to the transaction")
        assert partition0.offsets() == before  # nothing appended, nothing held back
        assert describe(client, txn_id).transaction_state == "Empty"
    finally:
        client.close()
    unknown = remote_id(appliance, partition0.topic, "unknown-to-the-coordinator")
    assert partition0.produce(["stray"], producer=(123456, 0), transactional_id=unknown)[0] \
        == E.INVALID_PRODUCER_ID_MAPPING
    assert partition0.offsets() == before
    assert "refused, INVALID_TXN_STATE" in appliance.log_text()


def test_a_delayed_produce_after_an_abort_is_refused(appliance, partition0):
    txn_id = remote_id(appliance, partition0.topic, "hanging")
    client, producer = begun(appliance, txn_id)
    try:
        assert add_partitions(client, txn_id, *producer, {partition0.topic: [0]}) == {
            (partition0.topic, 0): E.NONE}
        assert end(client, txn_id, *producer, commit=False) == E.NONE
        assert wait_for_state(client, txn_id, "CompleteAbort").transaction_state \
            == "CompleteAbort"
        # the Produce that was delayed past the abort: it would open a transaction for ever
        assert partition0.produce(["late"], producer=producer, transactional_id=txn_id)[0] \
            == E.INVALID_TXN_STATE
    finally:
        client.close()
    assert partition0.produce(["after"]) == (E.NONE, None)
    high_watermark, stable = partition0.offsets()
    assert stable == high_watermark
    reader = Reader("confluent", appliance.bootstrap, partition0.topic, "read_committed")
    try:
        values: list[str] = []
        deadline = time.monotonic() + 20
        while "after" not in values and time.monotonic() < deadline:
            values += reader.poll()
        assert values == ["after"]
    finally:
        reader.close()


def test_a_fenced_producers_delayed_batch_is_invalid_producer_epoch(appliance, partition0):
    txn_id = remote_id(appliance, partition0.topic, "fenced")
    client, producer = begun(appliance, txn_id)
    try:
        assert add_partitions(client, txn_id, *producer, {partition0.topic: [0]}) == {
            (partition0.topic, 0): E.NONE}
        assert partition0.produce(["first"], producer=producer, transactional_id=txn_id) \
            == (E.NONE, None)
        # a new producer of the id: the open transaction is aborted with a bumped epoch
        assert init(client, txn_id, retry_s=15).error_code == 0
        assert wait_for_state(client, txn_id, "Empty").transaction_state == "Empty"
        error, _ = partition0.produce(["late"], producer=producer, sequence=1,
                                      transactional_id=txn_id)
        assert error == E.INVALID_PRODUCER_EPOCH
        high_watermark, stable = partition0.offsets()
        assert stable == high_watermark
    finally:
        client.close()


def verify_only(client, version, *transactions):
    answer = client.call(aptt, version, transactions=[
        aptt.AddPartitionsToTxnTransaction(transactional_id=t, producer_id=pid,
                                           producer_epoch=epoch, verify_only=verify,
                                           topics=[aptt.AddPartitionsToTxnTopic(
                                               name=topic, partitions=parts)])
        for t, pid, epoch, topic, parts, verify in transactions])
    assert answer.error_code == 0
    return {r.transactional_id: {(tr.name, p.partition_index): E(p.partition_error_code)
                                 for tr in r.topic_results for p in tr.results_by_partition}
            for r in answer.results_by_transaction}


def test_the_coordinator_answers_v4_and_v5_batched(appliance, new_topic):
    topic = new_topic(partitions=2)
    client, (pid, epoch) = begun(appliance, "wire-a")
    try:
        assert add_partitions(client, "wire-a", pid, epoch, {topic: [0]}) == {
            (topic, 0): E.NONE}
        here = client.sock.getpeername()[1]
        unknown, elsewhere = (next(f"wire-{n}" for n in NAMES
                                   if (coordinator_port(appliance, f"wire-{n}") == here) == same)
                              for same in (True, False))
        answers = verify_only(client, 4, ("wire-a", pid, epoch, topic, [0, 1], True),
                              (unknown, 1, 0, topic, [0], True),
                              (elsewhere, 1, 0, topic, [0], True))
        assert answers == {"wire-a": {(topic, 0): E.NONE, (topic, 1): E.INVALID_TXN_STATE},
                           unknown: {(topic, 0): E.INVALID_PRODUCER_ID_MAPPING},
                           elsewhere: {(topic, 0): E.NOT_COORDINATOR}}
        assert verify_only(client, 5, ("wire-a", pid, epoch, topic, [1], True)) == {
            "wire-a": {(topic, 1): E.TRANSACTION_ABORTABLE}}
        assert verify_only(client, 4, ("wire-a", pid, epoch + 1, topic, [0], True)) == {
            "wire-a": {(topic, 0): E.PRODUCER_FENCED}}
        assert verify_only(client, 4, ("wire-a", pid, epoch, "kip890-missing", [0], True)) \
            == {"wire-a": {("kip890-missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}}
        # without verify_only, v4 adds (as a broker would for a client, KIP-890 part 2)
        assert verify_only(client, 4, ("wire-a", pid, epoch, topic, [1], False)) == {
            "wire-a": {(topic, 1): E.NONE}}
        assert sorted(describe(client, "wire-a").topics[0].partitions) == [0, 1]
        assert end(client, "wire-a", pid, epoch, commit=False) == E.NONE
    finally:
        client.close()


@pytest.mark.parametrize("client", list(WRITERS))
def test_real_clients_still_commit(appliance, new_topic, client):
    topic = new_topic()
    txn_id = remote_id(appliance, topic, f"real-{client}")
    WRITERS[client](appliance, txn_id, topic, [("one", True), ("gone", False), ("two", True)])
    reader = Reader(client, appliance.bootstrap, topic, "read_committed")
    try:
        values: list[str] = []
        deadline = time.monotonic() + 20
        while len(values) < 2 and time.monotonic() < deadline:
            values += reader.poll()
        assert values == ["one", "two"]
    finally:
        reader.close()
    assert "cannot verify transactions" not in appliance.log_text()


def test_with_verification_off_the_batch_hangs_as_before(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("kip890-off"), log_dirs=2, settings={
            **SETTINGS, "transaction.partition.verification.enable": "false"}) as off:
        target = Partition0(off, topic_maker(off.bootstrap, prefix="off")())
        txn_id = remote_id(off, target.topic, "off")
        client, producer = begun(off, txn_id)
        try:
            assert target.produce(["stray"], producer=producer, transactional_id=txn_id) \
                == (E.NONE, None)
            assert target.offsets() == (1, 0)  # open for ever: no marker will come
        finally:
            client.close()
            target.close()


def test_two_pipelined_produces_of_one_transaction_are_verified_together(appliance, new_topic):
    """Two requests of one producer, for two partitions led by one worker, sent back to back
    (librdkafka sends a transaction's partitions a few ms apart): both questions wait for the
    coordinator together and both batches are appended."""
    topic = new_topic(partitions=4)
    leaders = {p: leader_port(appliance, topic, p) for p in range(4)}
    port = leaders[0]
    same = [p for p, leader in leaders.items() if leader == port][:2]
    assert len(same) == 2, leaders
    txn_id = remote_id(appliance, topic, "pipelined")
    client, (pid, epoch) = begun(appliance, txn_id)
    leader = RawClient(port)
    try:
        assert add_partitions(client, txn_id, pid, epoch, {topic: same}) == {
            (topic, p): E.NONE for p in same}
        for p in same:
            batch = build_batch([(int(time.time() * 1000), None, b"v", ())], producer_id=pid,
                                producer_epoch=epoch, base_sequence=0, is_transactional=True)
            leader.send(produce, 8, transactional_id=txn_id, acks=-1, timeout_ms=10_000,
                        topic_data=[produce.TopicProduceData(name=topic, partition_data=[
                            produce.PartitionProduceData(index=p, records=batch)])])
        answers = [leader.receive().responses[0].partition_responses[0] for _ in same]
        assert [E(a.error_code) for a in answers] == [E.NONE, E.NONE]
        assert end(client, txn_id, pid, epoch, commit=True) == E.NONE
    finally:
        leader.close()
        client.close()


# -- the partition's side, pure ---------------------------------------------------------------

def header(producer_id=7, epoch=0, sequence=0, transactional=True):
    from klog.protocol.record_batch import read_header

    return read_header(build_batch([(0, None, b"v", ())], producer_id=producer_id,
                                   producer_epoch=epoch, base_sequence=sequence,
                                   is_transactional=transactional))


def test_a_marker_between_the_question_and_the_append_voids_the_guard():
    from appliance.workers.replication.producer_state import ProducerStates, Verdict

    states = ProducerStates()
    first = header()
    assert states.needs_verification(first)
    assert not states.needs_verification(header(transactional=False))
    guard = states.start_verification(first)
    assert states.check(first, None)[0] is Verdict.UNVERIFIED  # nothing presented
    assert states.check(first, guard)[0] is Verdict.APPEND
    assert states.check(header(sequence=3), guard)[0] is Verdict.OUT_OF_ORDER  # above lowest
    assert states.check(first, False)[0] is Verdict.APPEND  # verification off
    states.record_marker(7, 0, False, 0, offset=0)  # an abort landed meanwhile
    assert states.check(first, guard)[0] is Verdict.UNVERIFIED
    # once a verified batch opened the transaction, its next batches need none
    guard = states.start_verification(first)
    states.record(first, 1)
    assert not states.needs_verification(header(sequence=1))
    assert states.check(header(sequence=1), None)[0] is Verdict.APPEND
    # a marker of a bumped epoch (a fence): the old epoch is refused without a question
    states.record_marker(7, 1, False, 0, offset=2)
    assert not states.needs_verification(header(sequence=2))
    assert states.check(header(sequence=2), None)[0] is Verdict.FENCED
