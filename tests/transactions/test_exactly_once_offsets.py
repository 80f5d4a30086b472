"""TxnOffsetCommit (KIP-98/447) with a real client: confluent-kafka's
``send_offsets_to_transaction`` commits a group's offsets with the transaction, so they are
committed on COMMIT, dropped on ABORT, invisible to OffsetFetch while the transaction is open,
and a kill -9 of the appliance replays them the same way (pending until their marker).
One appliance for the module."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from klog.protocol.apis import find_coordinator, offset_fetch, txn_offset_commit
from klog.protocol.error_codes import ErrorCode
from tests.conftest import Appliance, topic_maker
from tests.polling import wait_until
from tests.transactions.coordinator_helpers import SETTINGS
from tests.worker.raw import RawClient


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    started = Appliance(tmp_path_factory.mktemp("txn-offsets"), log_dirs=2,
                        settings=SETTINGS).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def topic(appliance):
    return topic_maker(appliance.bootstrap, partitions=2, prefix="txn-offsets")()


def _producer(appliance, transactional_id: str) -> Producer:
    p = Producer({"bootstrap.servers": appliance.bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 60_000, "message.timeout.ms": 20_000})
    p.init_transactions(30)
    return p


def _group_metadata(appliance, group: str):
    """A consumer's group metadata outside a rebalance (generation -1, no member id): what a
    producer outside the group sends (v0-2 semantics in a v3 request)."""
    c = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    return c, c.consumer_group_metadata()


def _committed(appliance, group: str, topic: str, partitions=(0, 1), *,
               isolation: str = "read_committed") -> list[int]:
    """The group's committed offsets as a consumer sees them (-1001: none). A read_committed
    librdkafka consumer asks with require_stable: it waits out an open transaction."""
    c = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "isolation.level": isolation})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in partitions],
                                                timeout=20)]
    finally:
        c.close()


def _group_coordinator(appliance, group: str) -> RawClient:
    bootstrap = RawClient(appliance.port)
    answer = bootstrap.call(find_coordinator, 2, key=group, key_type=0)
    bootstrap.close()
    assert answer.error_code == 0, ErrorCode(answer.error_code)
    return RawClient(answer.port)


def test_commit_makes_the_offsets_committed_abort_drops_them(appliance, topic):
    consumer, metadata = _group_metadata(appliance, "txo-commit")
    p = _producer(appliance, "txo-commit")
    p.begin_transaction()
    p.produce(topic, b"x", partition=0)
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)],
                                  metadata, 20)
    p.commit_transaction(20)
    assert _committed(appliance, "txo-commit", topic) == [5, 7]
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 50)], metadata, 20)
    p.abort_transaction(20)
    assert _committed(appliance, "txo-commit", topic) == [5, 7]
    consumer.close()


def test_open_transaction_offsets_are_not_committed_yet(appliance, topic):
    consumer, metadata = _group_metadata(appliance, "txo-open")
    p = _producer(appliance, "txo-open")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], metadata, 20)
    assert _committed(appliance, "txo-open", topic, (0,),
                      isolation="read_uncommitted") == [-1001]  # none committed yet
    p.commit_transaction(20)
    assert _committed(appliance, "txo-open", topic, (0,)) == [3]
    consumer.close()


def test_require_stable_answers_unstable_while_the_transaction_is_open(appliance, topic):
    """OffsetFetch v7 ``require_stable`` (what a read_committed librdkafka consumer sends):
    UNSTABLE_OFFSET_COMMIT on the pending partition, the committed offset elsewhere; v5 and
    v7 without it answer the committed offsets only."""
    consumer, metadata = _group_metadata(appliance, "txo-stable")
    p = _producer(appliance, "txo-stable")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 1, 4)], metadata, 20)
    p.commit_transaction(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], metadata, 20)
    client = _group_coordinator(appliance, "txo-stable")
    wanted = [offset_fetch.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]

    def fetched(version, **fields):
        answer = client.call(offset_fetch, version, group_id="txo-stable", topics=wanted,
                             **fields)
        return [(q.committed_offset, ErrorCode(q.error_code))
                for q in answer.topics[0].partitions]

    # commit_transaction returns once EndTxn is answered (PrepareCommit written, as Kafka);
    # the markers land after it, and until then the partition stays unstable
    wait_until(lambda: fetched(7, require_stable=True)[1] == (4, ErrorCode.NONE), 20,
               "the first transaction's marker")
    assert fetched(7, require_stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
                                               (4, ErrorCode.NONE)]
    assert fetched(7) == fetched(5) == [(-1, ErrorCode.NONE), (4, ErrorCode.NONE)]
    p.commit_transaction(20)
    wait_until(lambda: fetched(7, require_stable=True)[0][1] == ErrorCode.NONE, 20,
               "the second transaction's marker")
    assert fetched(7, require_stable=True) == [(9, ErrorCode.NONE), (4, ErrorCode.NONE)]
    client.close()
    consumer.close()


def test_raw_fencing_and_refusals(appliance, topic):
    """v3's member fencing (a member id the group does not know), an unknown topic, and an
    older producer epoch than the partition has seen."""
    client = _group_coordinator(appliance, "txo-raw")
    part = txn_offset_commit.TxnOffsetCommitRequestPartition
    topics = [txn_offset_commit.TxnOffsetCommitRequestTopic(
        name=topic, partitions=[part(partition_index=0, committed_offset=1)]),
        txn_offset_commit.TxnOffsetCommitRequestTopic(
        name="txo-no-such-topic", partitions=[part(partition_index=0, committed_offset=1)])]
    answer = client.call(txn_offset_commit, 3, transactional_id="txo-raw", group_id="txo-raw",
                         producer_id=123456, producer_epoch=0, generation_id=4,
                         member_id="nobody", topics=topics)
    codes = {t.name: ErrorCode(t.partitions[0].error_code) for t in answer.topics}
    assert codes == {topic: ErrorCode.UNKNOWN_MEMBER_ID,
                     "txo-no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    answer = client.call(txn_offset_commit, 3, transactional_id="txo-raw", group_id="",
                         producer_id=123456, producer_epoch=0, topics=topics[:1])
    assert answer.topics[0].partitions[0].error_code == ErrorCode.INVALID_GROUP_ID
    client.close()


def test_kill_9_replays_committed_aborted_and_open(appliance, topic):
    """Committed offsets stay committed, aborted ones stay dropped, and an open transaction's
    stay pending after the reload; its COMMIT (sent by the reloaded transaction coordinator's
    timeout abort would drop them, so the producer commits) makes them committed."""
    consumer, metadata = _group_metadata(appliance, "txo-reload")
    p = _producer(appliance, "txo-reload")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 10)], metadata, 20)
    p.commit_transaction(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 20)], metadata, 20)
    p.abort_transaction(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 1, 30)], metadata, 20)
    consumer.close()
    appliance.kill()
    appliance.start()
    assert _committed(appliance, "txo-reload", topic, isolation="read_uncommitted") == \
        [10, -1001]
    deadline = time.monotonic() + 30
    while True:  # the producer's connections come back; its transaction is still open
        try:
            p.commit_transaction(10)
            break
        except Exception as exc:  # retriable while the coordinator reloads
            assert time.monotonic() < deadline, exc
            if not exc.args[0].retriable():
                raise
    assert _committed(appliance, "txo-reload", topic) == [10, 30]


def test_a_snapshot_keeps_pending_and_committed_transactional_offsets(tmp_path):
    """The group log's compaction by snapshot restates committed transactional offsets as
    committed and pending ones as pending (their producer's marker still decides): after
    the log start moved past the originals and a kill -9, nothing is lost."""
    from appliance.segments.layout import log_start_on_disk
    from tests.groups.test_offsets_log import SMALL_SEGMENTS, commit
    from tests.transactions.exactly_once_helpers import kill_9

    appliance = Appliance(tmp_path / "snap", settings={**SETTINGS, **SMALL_SEGMENTS}).start()
    try:
        topic = topic_maker(appliance.bootstrap, partitions=4, prefix="snap")()
        consumer, metadata = _group_metadata(appliance, "snap-open")
        done = _producer(appliance, "snap-done")
        done.begin_transaction()
        done.send_offsets_to_transaction([TopicPartition(topic, 0, 5)],
                                         _group_metadata(appliance, "snap-done")[1], 20)
        done.commit_transaction(20)
        still_open = _producer(appliance, "snap-open")
        still_open.begin_transaction()
        still_open.send_offsets_to_transaction([TopicPartition(topic, 1, 7)], metadata, 20)
        client = RawClient(appliance.port)
        directory = appliance.log_dirs[0] / "__consumer_offsets-0"
        rounds = 0
        while log_start_on_disk(str(directory)) == 0:
            assert rounds < 3000, "no snapshot moved the log start"
            assert set(commit(client, "snap-filler", topic,
                              {p: rounds for p in range(4)}).values()) == {ErrorCode.NONE}
            rounds += 1
        client.close()
        consumer.close()
        kill_9(appliance)
        appliance.start()
        assert _committed(appliance, "snap-done", topic, (0,)) == [5]
        assert _committed(appliance, "snap-open", topic, (1,),
                          isolation="read_uncommitted") == [-1001]
        deadline = time.monotonic() + 30
        while True:
            try:
                still_open.commit_transaction(10)
                break
            except Exception as exc:  # retriable while the coordinator reloads
                assert time.monotonic() < deadline, exc
                if not exc.args[0].retriable():
                    raise
        assert _committed(appliance, "snap-open", topic, (1,)) == [7]
    finally:
        appliance.stop()


def test_v3_fences_a_member_of_another_generation_or_instance(appliance, topic):
    """KIP-447: the consumer's group metadata (generation, member id, instance id) travels with
    the offsets; the member's own commits, and refusals for a stale generation
    (ILLEGAL_GENERATION) or another static instance (FENCED_INSTANCE_ID)."""
    from klog.protocol.apis import describe_groups

    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": "txo-member",
                         "group.instance.id": "txo-a", "session.timeout.ms": 6000,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    wait_until(lambda: consumer.poll(0.2) is None and consumer.assignment(), 30,
               "an assignment")
    p = _producer(appliance, "txo-member")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 2)],
                                  consumer.consumer_group_metadata(), 20)
    p.commit_transaction(20)
    assert _committed(appliance, "txo-member", topic, (0,)) == [2]
    client = _group_coordinator(appliance, "txo-member")
    (group,) = client.call(describe_groups, 4, groups=["txo-member"],
                           include_authorized_operations=False).groups
    (member,) = group.members
    part = txn_offset_commit.TxnOffsetCommitRequestPartition

    def attempt(generation: int, instance: str | None, member_id=member.member_id) -> ErrorCode:
        answer = client.call(
            txn_offset_commit, 3, transactional_id="txo-member", group_id="txo-member",
            producer_id=123457, producer_epoch=0, generation_id=generation,
            member_id=member_id, group_instance_id=instance,
            topics=[txn_offset_commit.TxnOffsetCommitRequestTopic(
                name=topic, partitions=[part(partition_index=1, committed_offset=1)])])
        return ErrorCode(answer.topics[0].partitions[0].error_code)

    assert attempt(10_000, "txo-a") is ErrorCode.ILLEGAL_GENERATION
    assert attempt(10_000, "txo-a", "a-zombie") is ErrorCode.FENCED_INSTANCE_ID
    assert attempt(10_000, "txo-b") is ErrorCode.UNKNOWN_MEMBER_ID
    assert attempt(10_000, None, "a-zombie") is ErrorCode.UNKNOWN_MEMBER_ID
    client.close()
    consumer.close()
