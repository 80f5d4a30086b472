"""Replication across three real appliances (two workers each) and a real three-server
ZooKeeper: a topic of replication factor 3 and min.insync.replicas=2 written by confluent-kafka
(idempotent, acks=all). Every replica holds the same batches; kill -9 of the leader's whole
appliance mid-production moves leadership to a follower in a higher leader epoch, loses no
acknowledged record and gives no offset two records; the killed appliance comes back,
truncates what it must, catches up and rejoins the ISR."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import REPO, Appliance
from tests.fleet.harness import (
    SESSION_MS,
    AckedWriter,
    FleetSpec,
    all_replicas_equal,
    kill_appliance,
    led,
    partition_state,
    read_partition,
    replica_batches,
)
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "replicated"
PARTITIONS = 3
FIRST_VALUE = 1_000_000  # the kill test's values, above the first test's
LAG_MS = 3000  # replica.lag.time.max.ms: short, so a stalled follower leaves the ISR soon
FLEET = FleetSpec("/klog-repl", settings={
    "replica.lag.time.max.ms": str(LAG_MS), "default.replication.factor": "3"})


def state(zk, partition: int, topic: str = TOPIC) -> dict:
    return partition_state(zk, topic, partition)


def end_offset_for_epoch(node_port: int, partition: int, epoch: int, current: int):
    """Ask a node OffsetForLeaderEpoch (v3, as followers do): (error, epoch, end offset)."""
    from klog.protocol.apis import offset_for_leader_epoch as api
    from klog.protocol.client import NEED_DATA, ClientConnection
    connection = ClientConnection()
    body = api.Request(replica_id=-1, topics=[api.OffsetForLeaderTopic(topic=TOPIC, partitions=[
        api.OffsetForLeaderPartition(partition=partition, current_leader_epoch=current,
                                     leader_epoch=epoch)])])
    with socket.create_connection(("127.0.0.1", node_port), timeout=10) as sock:
        sock.sendall(connection.send_request(api.SPEC.key, 3, body)[1])
        while (answer := connection.next_response()) is NEED_DATA:
            connection.receive_data(sock.recv(65536))
    result = answer[1].topics[0].partitions[0]
    return result.error_code, result.leader_epoch, result.end_offset


def test_replicas_hold_the_same_batches(fleet, zk):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 30, "leaders")
    for partition in range(PARTITIONS):
        assert len(state(zk, partition)["isr"]) == 3
    producer = Producer({"bootstrap.servers": fleet[1].bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    acked = []
    for i in range(3000):
        producer.produce(TOPIC, f"{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: acked.append(err is None))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == 3000 and all(acked)
    wait_until(lambda: all_replicas_equal(fleet, TOPIC, PARTITIONS), 30,
               "every replica to hold the same batches")
    for partition in range(PARTITIONS):
        batches = replica_batches(fleet[0], TOPIC, partition)
        assert batches[-1][0] + batches[-1][1] + 1 == 1000
        epoch = state(zk, partition)["leader_epoch"]
        assert {b[2] for b in batches} == {epoch}  # the leader stamped its epoch into each


def test_killing_the_leader_appliance_loses_no_acknowledged_record(fleet, zk):
    before = {p: state(zk, p) for p in range(PARTITIONS)}
    victim_id = before[0]["leader"] // 100
    victim = fleet[victim_id - 1]
    writer = AckedWriter(",".join(a.bootstrap for a in fleet if a is not victim), TOPIC,
                          PARTITIONS, FIRST_VALUE).start()
    wait_until(lambda: len(writer.acked) >= 1500, 60, "acknowledgements before the kill")
    kill_appliance(victim)
    acked_at_kill = len(writer.acked)
    wait_until(lambda: state(zk, 0)["leader"] // 100 not in (-1, victim_id) and
               state(zk, 0)["leader"] >= 0, SESSION_MS / 1000 + 30, "a new leader")
    after = state(zk, 0)
    assert after["leader_epoch"] > before[0]["leader_epoch"]
    assert after["leader"] in before[0]["isr"]
    # the new leader says where the old epoch ended in its log: where its own began
    new_port = fleet[after["leader"] // 100 - 1].port + after["leader"] % 100
    error, epoch, old_end = wait_until(
        lambda: (answer := end_offset_for_epoch(new_port, 0, before[0]["leader_epoch"],
                                                after["leader_epoch"]))[0] != 6 and answer,
        30, "the new leader to hear that it leads")  # 6: NOT_LEADER_OR_FOLLOWER, not yet
    assert (error, epoch) == (0, before[0]["leader_epoch"]) and old_end > 0
    stale = end_offset_for_epoch(new_port, 0, before[0]["leader_epoch"],
                                 before[0]["leader_epoch"])
    assert stale[0] == 74  # FENCED_LEADER_EPOCH: a caller that missed the election
    wait_until(lambda: len(writer.acked) >= acked_at_kill + 1500, 90,
               "acknowledgements from the new leaders")
    victim.start(timeout_s=60)
    wait_until(lambda: all(len(state(zk, p)["isr"]) == 3 for p in range(PARTITIONS)), 60,
               "the restarted appliance to rejoin every ISR")
    writer.stop()
    assert not writer.errors, writer.errors[:5]
    wait_until(lambda: all_replicas_equal(fleet, TOPIC, PARTITIONS), 60,
               "every replica to hold the same batches")
    survivor = next(a for a in fleet if a is not victim)
    values_seen = set()
    for partition in range(PARTITIONS):
        acked = {o: v for (p, o), v in writer.acked.items() if p == partition}
        end = max(acked) + 1
        records = read_partition(survivor.bootstrap, TOPIC, partition, end)
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), "offsets in order, each once"
        by_offset = dict(records)
        for offset, value in acked.items():
            assert by_offset.get(offset) == value, f"{partition}@{offset}"
        values = [v for _, v in records if v >= FIRST_VALUE]
        assert values == sorted(values), "per-partition order"
        assert len(set(values)) == len(values) and not values_seen & set(values), \
            "a record consumed twice"
        values_seen |= set(values)
    assert set(writer.acked.values()) <= values_seen
    # each log dir keeps its replicas' high watermarks (Kafka's replication-offset-checkpoint)
    wait_until(lambda: all(past_the_first_test(checkpointed(a)) for a in fleet), 30,
               "high-watermark checkpoints")


def checkpointed(appliance: Appliance) -> dict[int, int]:
    """TOPIC's partitions -> high watermark, from the appliance's checkpoint files."""
    found = {}
    for disk in appliance.log_dirs:
        path = Path(disk) / "replication-offset-checkpoint"
        if path.exists():
            for line in path.read_text().splitlines()[2:]:
                topic, partition, offset = line.split()
                if topic == TOPIC:
                    found[int(partition)] = int(offset)
    return found


def past_the_first_test(found: dict[int, int]) -> bool:
    return sorted(found) == list(range(PARTITIONS)) and all(v > 1000 for v in found.values())


def test_a_stalled_follower_leaves_the_isr_and_rejoins(fleet, zk):
    """A topic whose replication factor is below its min.insync.replicas is refused at
    creation. SIGSTOP of a follower's worker: after replica.lag.time.max.ms the leader drops
    it from the ISR (the acks=all write that waited for it is answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND), so acks=all on a topic with min.insync.replicas=3 is
    refused (NOT_ENOUGH_REPLICAS) while acks=1 still works; after SIGCONT it catches up and
    the leader takes it back."""
    from klog import Producer as KlogProducer
    from klog.errors import KafkaError
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    with pytest.raises(Exception, match="below min.insync.replicas=3"):
        admin.create_topics([NewTopic("hopeless", 1, 2, config={"min.insync.replicas": "3"})]
                            )["hopeless"].result(30)
    admin.create_topics([NewTopic("strict", 1, 3, config={"min.insync.replicas": "3"})]
                        )["strict"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "strict", 1), 30, "a leader for strict")
    wait_until(lambda: len(state(zk, 0, "strict")["isr"]) == 3, 30, "a full ISR")
    current = state(zk, 0, "strict")
    follower = next(r for r in current["isr"] if r != current["leader"])
    pid = fleet[follower // 100 - 1].worker_pid(follower % 100)
    bootstrap = fleet[current["leader"] // 100 - 1].bootstrap
    strict = KlogProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    relaxed = KlogProducer(bootstrap_servers=bootstrap, acks=1, retries=0)
    try:
        strict.send("strict", b"in sync", partition=0).result(30)
        os.kill(pid, signal.SIGSTOP)
        try:
            # appended, then committed only once the stalled follower left the ISR: with
            # fewer copies than min.insync.replicas, which the producer is told
            waiting = strict.send("strict", b"waits for the stalled follower", partition=0)
            with pytest.raises(KafkaError, match="^NOT_ENOUGH_REPLICAS_AFTER_APPEND for"):
                waiting.result(LAG_MS / 1000 + 30)
            wait_until(lambda: follower not in state(zk, 0, "strict")["isr"], 30,
                       "the stalled follower to leave the ISR")
            with pytest.raises(KafkaError, match="^NOT_ENOUGH_REPLICAS for"):
                strict.send("strict", b"refused", partition=0).result(30)
            relaxed.send("strict", b"one copy is enough", partition=0).result(30)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: follower in state(zk, 0, "strict")["isr"], 60,
                   "the follower to catch up and rejoin the ISR")
        # the leader hears of the write from its supervisor just after ZooKeeper has it: a
        # client may still get the retriable NOT_ENOUGH_REPLICAS once, so this one retries
        patient = KlogProducer(bootstrap_servers=bootstrap, acks="all")
        patient.send("strict", b"in sync again", partition=0).result(30)
        patient.close()
    finally:
        strict.close()
        relaxed.close()


def test_idle_followers_stay_in_the_isr_and_copy_the_next_write_at_once(fleet, zk):
    """Followers of a partition nobody writes keep fetching (their sessions' long polls);
    the leader answers those fetches on a path of its own (Partition.note_idle_fetch),
    which must still count them as caught up: over three times replica.lag.time.max.ms
    of silence the ISR stays whole. The write after it is an acks=all write with
    min.insync.replicas=3, so it is acknowledged only once both followers have it."""
    from klog import Producer as KlogProducer
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("quiet", 1, 3, config={"min.insync.replicas": "3"})]
                        )["quiet"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "quiet", 1), 30, "a leader for quiet")
    wait_until(lambda: len(state(zk, 0, "quiet")["isr"]) == 3, 30, "a full ISR")
    leader = state(zk, 0, "quiet")["leader"]
    producer = KlogProducer(bootstrap_servers=fleet[leader // 100 - 1].bootstrap, acks="all")
    try:
        producer.send("quiet", b"before the silence", partition=0).result(30)
        silence_ends = time.monotonic() + 3 * LAG_MS / 1000
        while time.monotonic() < silence_ends:
            assert len(state(zk, 0, "quiet")["isr"]) == 3, "an idle follower left the ISR"
            time.sleep(0.5)
        start = time.monotonic()
        producer.send("quiet", b"after the silence", partition=0).result(30)
        assert time.monotonic() - start < LAG_MS / 1000  # copied at once, not after a shrink
    finally:
        producer.close()
    assert len(state(zk, 0, "quiet")["isr"]) == 3


def test_a_returning_leader_truncates_what_only_it_had(fleet, zk):
    """The leader takes acks=1 records while both followers are stopped, then dies: a follower
    leads in a new epoch without them, and the old leader, back, asks it where its epoch
    ended (OffsetForLeaderEpoch) and truncates there before copying the new leader's log.
    Every acks=all record survives; every replica ends with the same batches."""
    from klog import Producer as KlogProducer
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("diverge", 1, 3, config={"min.insync.replicas": "2"})]
                        )["diverge"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "diverge", 1), 30, "a leader for diverge")
    wait_until(lambda: len(state(zk, 0, "diverge")["isr"]) == 3, 30, "a full ISR")
    before = state(zk, 0, "diverge")
    leader = fleet[before["leader"] // 100 - 1]
    committed = KlogProducer(bootstrap_servers=leader.bootstrap, acks="all")
    for i in range(100):
        committed.send("diverge", f"{i}".encode(), partition=0)
    committed.flush(30)
    followers = [r for r in before["isr"] if r != before["leader"]]
    pids = [fleet[r // 100 - 1].worker_pid(r % 100) for r in followers]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        alone = KlogProducer(bootstrap_servers=leader.bootstrap, acks=1, retries=0)
        for i in range(100, 150):  # acknowledged by the leader alone: never committed
            alone.send("diverge", f"{i}".encode(), partition=0).result(10)
        alone.close()
        kill_appliance(leader)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: state(zk, 0, "diverge")["leader"] in followers, SESSION_MS / 1000 + 30,
               "a follower to lead")
    assert state(zk, 0, "diverge")["leader_epoch"] > before["leader_epoch"]
    survivor = next(a for a in fleet if a is not leader)
    after = KlogProducer(bootstrap_servers=survivor.bootstrap, acks="all")
    for i in range(1000, 1050):
        after.send("diverge", f"{i}".encode(), partition=0)
    after.flush(60)
    after.close()
    committed.close()
    leader.start(timeout_s=60)
    wait_until(lambda: len(state(zk, 0, "diverge")["isr"]) == 3, 60,
               "the old leader to rejoin the ISR")
    wait_until(lambda: all_replicas_equal(fleet, "diverge", 1), 60, "replicas alike")
    # the followers may have had one fetch answered just before they stopped: the cut is at
    # what the new leader holds of epoch 0, from 100 up
    cut = re.search(r"diverge-0: truncating from 150 to (\d+) ", leader.log_text())
    assert cut is not None and 100 <= int(cut.group(1)) < 150
    kept = int(cut.group(1))
    consumer = Consumer({"bootstrap.servers": survivor.bootstrap, "group.id": "diverge-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("diverge", 0, 0)])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < kept + 50 and time.monotonic() < deadline:
        values += [int(m.value()) for m in consumer.consume(200, timeout=1) if not m.error()]
    consumer.close()
    assert values == list(range(kept)) + list(range(1000, 1050))


def test_the_fleet_settles_with_nothing_under_replicated(fleet, zk):
    """After the faults above, and a group's commit: every partition's ISR is whole again, as
    `klog cluster status` reports it, the offsets topic's included: it has
    offsets.topic.replication.factor (3) replicas, one per appliance."""
    consumer = Consumer({"bootstrap.servers": fleet[0].bootstrap, "group.id": "settle",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    wait_until(lambda: consumer.consume(10, timeout=1) and consumer.assignment(), 60,
               "the group to read")
    consumer.commit(asynchronous=False)
    consumer.close()
    offsets = AdminClient({"bootstrap.servers": fleet[0].bootstrap}).list_topics(
        "__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert {len({r // 100 for r in p.replicas}) for p in offsets.partitions.values()} == {3}

    def status():
        done = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status",
                               "--config", str(fleet[0].config), "--json"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return orjson.loads(done.stdout)
    settled = wait_until(lambda: (s := status())["under_replicated_partitions"] == [] and s,
                         90, "every ISR to be whole")
    assert settled["offline_partitions"] == []
