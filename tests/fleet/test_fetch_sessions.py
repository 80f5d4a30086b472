"""KIP-227 fetch sessions against a real leader (two appliances of one worker each: nodes 100
and 200, replication factor 2). Appliance 2 is stopped, so node 200's fetcher is gone and its
replicas leave every ISR; this test then fetches as node 200 would (the replica client id on
the inter-broker listener), in a session, and reads what the leader answers: a full first
answer with a session id, answers that leave out what has nothing new, the position last
named kept by the leader, forgotten partitions gone, Kafka's errors for a lost session or an
epoch out of order, none for a consumer or for a client that is not the replica it names.
Appliance 2 then starts again, and its own follower (in sessions) copies everything written
meanwhile."""

from __future__ import annotations

import time

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoNodeError

from appliance.workers.replication.identity import replica_client_id
from klog.protocol.apis import fetch, produce
from klog.protocol.error_codes import ErrorCode
from klog.protocol.records import build_batch, decode_batches
from klog.wire import BrokerConnection
from tests.fleet.harness import FleetSpec, all_replicas_equal, partition_state
from tests.polling import wait_until

TOPIC, PARTITIONS = "sessions", 4
LEADER, IMPERSONATED = 100, 200
FLEET = FleetSpec("/klog-fetch-sessions", log_dirs=1, broker_ids=(1, 2), settings={
    "default.replication.factor": "2", "auto.leader.rebalance.enable": "false"})


def states(zk) -> list[dict]:
    return [partition_state(zk, TOPIC, p) for p in range(PARTITIONS)]


def full_isrs(zk) -> bool:
    """Every partition's ISR holds both appliances; False while a state is not there yet:
    this test's session may be served by a ZooKeeper server a moment behind the one that
    answered the topic's creation (seen once in make test: NoNodeError)."""
    try:
        return all(len(s["isr"]) == 2 for s in states(zk))
    except NoNodeError:
        return False


@pytest.fixture(scope="module")
def alone(fleet, zk):
    """Appliance 1 leading every partition, appliance 2 stopped and out of every ISR."""
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2)])[TOPIC].result(timeout=30)
    wait_until(lambda: full_isrs(zk), 30, "full ISRs")
    fleet[1].stop()
    wait_until(lambda: all(s["leader"] == LEADER and s["isr"] == [LEADER]
                           for s in states(zk)), 60, "appliance 1 alone in every ISR")
    cluster_id = orjson.loads(zk.get("/cluster/id")[0])["id"]
    return fleet[0], cluster_id


def write(appliance, partition: int, value: bytes) -> None:
    batch = build_batch([(None, None, value, [])], now_ms=int(time.time() * 1000))
    conn = BrokerConnection(appliance.host, appliance.port)
    try:
        answer = conn.request(produce.SPEC.key, 8, produce.Request(
            transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
                produce.TopicProduceData(name=TOPIC, partition_data=[
                    produce.PartitionProduceData(index=partition, records=bytes(batch))])]))
    finally:
        conn.close()
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE


class Replica:
    """Fetch v11 as node 200's fetcher sends it, on one connection."""

    def __init__(self, appliance, cluster_id: str, epochs: list[int], client_id=None):
        self.conn = BrokerConnection(appliance.host, appliance.port, client_id=client_id or
                                     replica_client_id(cluster_id, IMPERSONATED))
        self.leader_epochs = epochs  # by partition

    def fetch(self, session_id: int, session_epoch: int, offsets: dict[int, int],
              forgotten=(), replica_id: int = IMPERSONATED, max_wait_ms: int = 300):
        body = fetch.Request(
            replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=session_id, session_epoch=session_epoch,
            topics=[fetch.FetchTopic(topic=TOPIC, partitions=[fetch.FetchPartition(
                partition=p, current_leader_epoch=self.leader_epochs[p], fetch_offset=o,
                log_start_offset=0, partition_max_bytes=1 << 20)
                for p, o in offsets.items()])] if offsets else [],
            forgotten_topics_data=[fetch.ForgottenTopic(topic=TOPIC, partitions=list(
                forgotten))] if forgotten else [], rack_id="")
        return self.conn.request(fetch.SPEC.key, 11, body)


def parts(answer) -> dict[int, fetch.PartitionData]:
    return {p.partition_index: p for t in answer.responses for p in t.partitions}


def values(data) -> list[bytes]:
    return [r.value for _, records in decode_batches(bytes(data.records or b""))
            for r in records]


def test_a_session_answers_what_is_new_at_the_position_last_named(alone, zk):
    leader, cluster_id = alone
    replica = Replica(leader, cluster_id, [s["leader_epoch"] for s in states(zk)])
    for p in range(PARTITIONS):
        write(leader, p, b"before-%d" % p)

    first = replica.fetch(0, 0, {p: 0 for p in range(PARTITIONS)})
    assert first.error_code == ErrorCode.NONE and first.session_id != 0
    session = first.session_id
    assert sorted(parts(first)) == list(range(PARTITIONS))  # a full answer
    assert all(values(d) == [b"before-%d" % p] for p, d in parts(first).items())

    # the follower names its new positions; nothing more is there: an empty answer
    quiet = replica.fetch(session, 1, {p: 1 for p in range(PARTITIONS)})
    assert (quiet.error_code, quiet.session_id, parts(quiet)) == (ErrorCode.NONE, session, {})

    # a write to partition 2 only: only it comes, though the request names nothing
    write(leader, 2, b"new-2")
    only = replica.fetch(session, 2, {})
    assert sorted(parts(only)) == [2] and values(parts(only)[2]) == [b"new-2"]
    assert parts(only)[2].high_watermark == 2

    # not named again, the leader reads it again where it was last named
    again = replica.fetch(session, 3, {})
    assert sorted(parts(again)) == [2] and values(parts(again)[2]) == [b"new-2"]

    # partition 2 moves on, partition 1 is forgotten: a write to each brings only 0's
    assert parts(replica.fetch(session, 4, {2: 2}, forgotten=[1])) == {}
    write(leader, 1, b"new-1")
    write(leader, 0, b"new-0")
    moved = replica.fetch(session, 5, {})
    assert sorted(parts(moved)) == [0] and values(parts(moved)[0]) == [b"new-0"]

    # Kafka's refusals: an epoch out of order, an unknown session
    skipped = replica.fetch(session, 7, {})
    assert (skipped.error_code, parts(skipped)) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, {})
    unknown = replica.fetch(session ^ 1, 1, {})
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert replica.fetch(session, 6, {0: 2}).error_code == ErrorCode.NONE  # still in order

    # a consumer's fetch gets no session; epoch -1 closes this one
    consumer = replica.fetch(0, 0, {1: 0}, replica_id=-1)
    assert consumer.session_id == 0 and values(parts(consumer)[1]) == [b"before-1", b"new-1"]
    closing = replica.fetch(session, -1, {0: 2}, max_wait_ms=0)
    assert closing.error_code == ErrorCode.NONE and closing.session_id == 0
    assert replica.fetch(session, 7, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    replica.conn.close()

    # a client that names node 200 without being its fetcher gets neither data nor a session
    stray = Replica(leader, cluster_id, replica.leader_epochs, client_id="not-a-replica")
    refused = stray.fetch(0, 0, {0: 0})
    assert refused.session_id == 0
    assert parts(refused)[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert stray.fetch(12345, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    stray.conn.close()


def test_the_real_follower_catches_up_in_sessions(alone, fleet, zk):
    """Appliance 2 starts again: its fetcher copies everything written meanwhile (and more
    written as it rejoins), and each replica holds the same batches."""
    leader, _ = alone
    fleet[1].start(timeout_s=60)
    for p in range(PARTITIONS):
        write(leader, p, b"after-%d" % p)
    wait_until(lambda: all(len(s["isr"]) == 2 for s in states(zk)), 60, "full ISRs again")
    for p in range(PARTITIONS):
        write(leader, p, b"rejoined-%d" % p)
    wait_until(lambda: all_replicas_equal(fleet, TOPIC, PARTITIONS), 30, "equal replicas")
