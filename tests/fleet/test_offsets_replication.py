"""__consumer_offsets replicated across three real appliances and a real three-server
ZooKeeper: groups of confluent-kafka and kafka-python consumers commit offsets (each commit
answered once the high watermark of its offsets partition passed it); the coordinators'
snapshots move the log start of the offsets partitions on the leader and on its followers;
kill -9 of the appliance whose worker coordinates both groups moves them to the new leader of
their offsets partition, in a higher leader epoch, with every offset each client last
committed successfully; new members resume from those offsets with nothing skipped; the
killed appliance comes back, catches up (from the leader's log start) and every replica of
the offsets partitions holds the same batches from the same log start."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from appliance.segments.layout import log_start_on_disk
from appliance.workers.groups.offsets_log import partition_for
from klog.protocol.apis import find_coordinator as find_coordinator_api
from klog.protocol.apis import list_groups, offset_commit, offset_fetch
from klog.protocol.error_codes import ErrorCode
from tests.fleet.harness import (
    SESSION_MS,
    FleetSpec,
    appliance_of,
    kill_appliance,
    led,
    partition_state,
    replica_batches,
)
from tests.polling import wait_until
from tests.worker.raw import RawClient

pytestmark = pytest.mark.interop

OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 3
TOPIC = "tracked"
PARTITIONS = 3
PER_PARTITION = 4000
BATCH = 20  # records per poll, each poll's positions committed at once
# after the kill, the new members only have to resume and read to the end: larger polls (the
# commits around the kill are the first members' story, at BATCH)
RESUME_BATCH = 500
LAG_MS = 5000  # replica.lag.time.max.ms: stopped followers leave the ISR soon
# auto.leader.rebalance.enable off: the tests choose the coordinator by the leader they find
# and pause or kill the others. A controller elected after an earlier test's kill checks for
# imbalance 5 s later (Kafka's first check), and once moved leadership of the offsets
# partition to a replica the test had just paused (OffsetFetch then answered NOT_COORDINATOR).
FLEET = FleetSpec("/klog-offsets", log_dirs=1, settings={
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "offsets.topic.segment.bytes": str(64 * 1024), "default.replication.factor": "3",
    "min.insync.replicas": "2", "replica.lag.time.max.ms": str(LAG_MS),
    "auto.leader.rebalance.enable": "false"})


def find_coordinator(port: int, group: str) -> tuple[int, int]:
    """FindCoordinator v2 asked of one node: (error code, coordinator node id)."""
    client = RawClient(port)
    try:
        answer = client.call(find_coordinator_api, 2, key=group, key_type=0)
    finally:
        client.close()
    return answer.error_code, answer.node_id


def offset_fetch_error(port: int, group: str) -> int:
    """OffsetFetch v5 of a group asked of one node: its top-level error code."""
    client = RawClient(port)
    try:
        return client.call(offset_fetch, 5, group_id=group, topics=None).error_code
    finally:
        client.close()


def simple_commit(port: int, group: str, offset: int) -> ErrorCode:
    """An OffsetCommit v7 outside any generation (as an assign() consumer's) of `offset` for
    partition 0 of TOPIC, asked of one node: its error."""
    client = RawClient(port, timeout_s=30)
    try:
        answer = client.call(offset_commit, 7, group_id=group, generation_id_or_member_epoch=-1,
                             member_id="", group_instance_id=None, topics=[
                                 offset_commit.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                                     offset_commit.OffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=offset,
                                         committed_leader_epoch=-1, committed_metadata="")])])
    finally:
        client.close()
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def log_start(appliance, topic: str, partition: int) -> int | None:
    directory = Path(appliance.log_dirs[0]) / f"{topic}-{partition}"
    return log_start_on_disk(str(directory)) if directory.is_dir() else None


def groups_on(partition: int, prefix: str) -> str:
    """A group id of `prefix` that lives in `partition` of the offsets topic."""
    return next(f"{prefix}-{i}" for i in range(1000)
                if partition_for(f"{prefix}-{i}", OFFSETS_PARTITIONS) == partition)


class Member(threading.Thread):
    """One group member in a thread: polls at most BATCH records, then commits the positions
    they reach (synchronously); remembers what it consumed, every commit it attempted and
    the last one answered without error, per partition. `pause` stops it between polls
    (`idle` says it has stopped); `stop` closes the consumer. `batch`: records per poll."""

    def __init__(self, client: str, bootstrap: str, group: str, batch: int = BATCH):
        super().__init__(daemon=True)
        self.client, self.bootstrap, self.group = client, bootstrap, group
        self.batch = batch
        self.consumed: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
        self.first: dict[int, int] = {}  # partition -> first offset this member read
        self.attempted: dict[int, int] = {}
        self.committed: dict[int, int] = {}  # the last commit answered without error
        self.failures: list[str] = []
        self.pause, self.idle, self.stopping = (threading.Event(), threading.Event(),
                                                threading.Event())

    def run(self) -> None:
        consumer = (self._confluent() if self.client == "confluent" else self._kafka_python())
        try:
            while not self.stopping.is_set():
                if self.pause.is_set():
                    self.idle.set()
                    time.sleep(0.05)
                    continue
                self.idle.clear()
                positions = self._poll(consumer)
                if positions:
                    self.attempted.update(positions)
                    try:
                        self._commit(consumer, positions)
                        self.committed.update(positions)
                    except Exception as exc:  # noqa: BLE001 - each client its own errors
                        self.failures.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.02)
        finally:
            consumer.close()

    def _note(self, partition: int, offset: int) -> None:
        self.consumed[partition].add(offset)
        self.first.setdefault(partition, offset)

    def _confluent(self):
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        consumer.subscribe([TOPIC])
        return consumer

    def _kafka_python(self):
        from kafka import KafkaConsumer
        return KafkaConsumer(TOPIC, bootstrap_servers=self.bootstrap, group_id=self.group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=1000,
                             max_poll_records=self.batch)

    def _poll(self, consumer) -> dict[int, int]:
        positions: dict[int, int] = {}
        if self.client == "confluent":
            for message in consumer.consume(self.batch, timeout=0.5):
                if message.error() is None:
                    self._note(message.partition(), message.offset())
                    positions[message.partition()] = message.offset() + 1
        else:
            for records in consumer.poll(timeout_ms=500, max_records=self.batch).values():
                for record in records:
                    self._note(record.partition, record.offset)
                    positions[record.partition] = record.offset + 1
        return positions

    def _commit(self, consumer, positions: dict[int, int]) -> None:
        if self.client == "confluent":
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in positions.items()],
                            asynchronous=False)
        else:
            from kafka import TopicPartition as KafkaTopicPartition
            from kafka.structs import OffsetAndMetadata
            consumer.commit({KafkaTopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1)
                             for p, o in positions.items()})

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)


def committed_offsets(bootstrap: str, group: str) -> dict[int, int] | None:
    """The group's committed offsets as OffsetFetch answers them (None while it cannot)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                                   timeout=10)
    except KafkaException:
        return None
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def test_committed_offsets_survive_the_coordinators_appliance(fleet, zk):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 30, "leaders")
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(PARTITIONS * PER_PARTITION):
        producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(60) == 0
    # both groups in one partition of the offsets topic, so one kill moves both
    target = 0
    groups = {"confluent": groups_on(target, "offsets-confluent"),
              "kafka-python": groups_on(target, "offsets-kafka-python")}
    error, coordinator = wait_until(
        lambda: (answer := find_coordinator(fleet[1].port, groups["confluent"]))[0] == 0
        and answer, 30, "the offsets topic and a coordinator")
    for partition in range(OFFSETS_PARTITIONS):  # three replicas, one per appliance
        state = partition_state(zk, OFFSETS, partition)
        assert len({r // 100 for r in state["isr"]}) == 3, state
    before = partition_state(zk, OFFSETS, target)
    assert coordinator == before["leader"]
    victim = appliance_of(fleet, coordinator)
    survivors = [a for a in fleet if a is not victim]
    wait_until(lambda: offset_fetch_error(victim.port, groups["confluent"]) == 0, 30,
               "the coordinator to load its partition")
    for follower in survivors:  # its replicas' workers: not the coordinator
        assert offset_fetch_error(follower.port, groups["confluent"]) == \
            ErrorCode.NOT_COORDINATOR
    members = {client: Member(client, survivors[0].bootstrap, group)
               for client, group in groups.items()}
    for member in members.values():
        member.start()

    # commits flow, and snapshots move the log start of the leader and of both followers
    wait_until(lambda: all(m.committed for m in members.values()) and
               all((log_start(a, OFFSETS, target) or 0) > 0 for a in fleet), 90,
               "commits, a snapshot and the followers' log starts")
    for member in members.values():
        member.pause.set()
    wait_until(lambda: all(m.idle.is_set() for m in members.values()), 30, "members idle")
    acknowledged = {client: dict(m.committed) for client, m in members.items()}
    attempted = {client: dict(m.attempted) for client, m in members.items()}

    kill_appliance(victim)
    after = wait_until(lambda: (s := partition_state(zk, OFFSETS, target))["leader"] >= 0
                       and s["leader"] // 100 != coordinator // 100 and s,
                       SESSION_MS / 1000 + 30, "a new leader of the offsets partition")
    assert after["leader_epoch"] > before["leader_epoch"]
    for group in groups.values():  # every survivor points at the new leader
        for appliance in survivors:
            wait_until(lambda a=appliance, g=group: find_coordinator(a.port, g) ==
                       (0, after["leader"]), 30, "FindCoordinator to name the new leader")
    for client, group in groups.items():
        found = wait_until(lambda g=group: committed_offsets(survivors[1].bootstrap, g), 60,
                           f"the committed offsets of {group}")
        for partition, offset in acknowledged[client].items():
            assert offset <= found[partition] <= attempted[client][partition], \
                (client, partition, acknowledged[client], found)
        assert set(acknowledged[client]) <= {p for p, o in found.items() if o >= 0} <= \
            set(attempted[client])
        acknowledged[client] = {p: found.get(p, -1) for p in range(PARTITIONS)}
    for member in members.values():
        member.stop()
    old = members

    # new members resume from the committed offsets, and read to the end
    members = {client: Member(client, survivors[1].bootstrap, group, RESUME_BATCH)
               for client, group in groups.items()}
    for member in members.values():
        member.start()
    try:
        wait_until(lambda: all(len(m.consumed[p] | old[c].consumed[p]) >= PER_PARTITION
                               for c, m in members.items() for p in range(PARTITIONS)), 120,
                   "the new members to read to the end")
    except AssertionError:  # say who stopped short, and where the partitions are
        for c, m in members.items():
            print("DIAG", c, {p: (len(m.consumed[p] | old[c].consumed[p]), m.first.get(p),
                                  max(m.consumed[p], default=None)) for p in range(PARTITIONS)},
                  m.failures[-5:])
        for p in range(PARTITIONS):
            print("DIAG state", p, partition_state(zk, TOPIC, p))
        raise
    for member in members.values():
        member.stop()
    for client, member in members.items():
        for partition in range(PARTITIONS):
            resumed = acknowledged[client][partition]
            start = resumed if resumed >= 0 else 0
            assert member.first.get(partition, PER_PARTITION) == start, (client, partition)
            assert member.consumed[partition] >= set(range(start, PER_PARTITION))
            assert old[client].consumed[partition] >= set(range(start)), "skipped before"
    print(f"commits that failed around the kill: "
          f"{ {c: m.failures[:3] for c, m in old.items()} }")

    # the killed appliance returns: every replica of the offsets partitions ends alike
    victim.start(timeout_s=60)
    wait_until(lambda: all(len(partition_state(zk, OFFSETS, p)["isr"]) == 3
                           for p in range(OFFSETS_PARTITIONS)), 90,
               "the returned appliance back in every ISR of the offsets topic")
    wait_until(lambda: all(replicas_alike(fleet, p) for p in range(OFFSETS_PARTITIONS)), 60,
               "the replicas of the offsets partitions to hold the same batches")
    leader_copy = replica_batches(appliance_of(fleet, after["leader"]), OFFSETS, target)
    assert max(b[2] for b in leader_copy) >= after["leader_epoch"]  # stamped by the new leader
    assert log_start(victim, OFFSETS, target) > 0  # the snapshots' start, on every replica
    restarted = [line for line in victim.log_text().splitlines()
                 if f"{OFFSETS}-{target}" in line and ("truncat" in line or "restart" in line)]
    print("the returned replica:", restarted[-3:])


def replicas_alike(fleet, partition: int) -> bool:
    """Every appliance's replica starts at the same log start, with the same batches from
    there on (segments may be cut differently: a follower rolls on its own)."""
    starts = {log_start(a, OFFSETS, partition) for a in fleet}
    if len(starts) != 1 or None in starts:
        return False
    start = starts.pop()
    copies = [[b for b in replica_batches(a, OFFSETS, partition) if b[0] >= start]
              for a in fleet]
    return all(c == copies[0] for c in copies)


def test_a_commit_without_enough_in_sync_replicas_is_retried_until_they_return(fleet, zk):
    """Both followers' appliances of an offsets partition killed: the controller drops them
    from the ISR, and with fewer in-sync replicas than min.insync.replicas (2) a commit is
    answered COORDINATOR_NOT_AVAILABLE, stored nowhere; kafka-python's commit, refused,
    retries until the appliances are back, caught up and in the ISR again, and succeeds.
    (Killed, not stopped: a client must not be left waiting on a paused node's socket.)"""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata
    target = 1
    group = groups_on(target, "offsets-isr")
    wait_until(lambda: len(partition_state(zk, OFFSETS, target)["isr"]) == 3, 60, "a full ISR")
    leader = partition_state(zk, OFFSETS, target)["leader"]
    home = appliance_of(fleet, leader)
    others = [a for a in fleet if a is not home]
    wait_until(lambda: simple_commit(home.port, group, 1) == ErrorCode.NONE, 30,
               "a first commit")
    consumer = KafkaConsumer(bootstrap_servers=home.bootstrap, group_id=group,
                             enable_auto_commit=False, request_timeout_ms=90_000)
    partition = KafkaTopicPartition(TOPIC, 0)
    consumer.assign([partition])
    outcome: list = []
    retrying = threading.Thread(target=lambda: outcome.append(_commit_or_error(
        consumer, {partition: OffsetAndMetadata(2, "", -1)})), daemon=True)
    refusals = _Refusals(group)
    try:
        for appliance in others:
            kill_appliance(appliance)
        wait_until(lambda: partition_state(zk, OFFSETS, target)["isr"] == [leader],
                   SESSION_MS / 1000 + 30, "the killed followers to leave the ISR")
        assert wait_until(lambda: (error := simple_commit(home.port, group, 3)) !=
                          ErrorCode.NONE and error, 30, "a refusal") == \
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        retrying.start()
        wait_until(lambda: refusals.seen, 30, "kafka-python's commit to be refused")
    finally:
        refusals.close()
        for appliance in others:
            appliance.start(timeout_s=60)
    retrying.join(120)
    assert outcome == [None], outcome  # retried until the ISR was back
    assert committed_offsets(home.bootstrap, group)[0] == 2
    consumer.close()
    wait_until(lambda: len(partition_state(zk, OFFSETS, target)["isr"]) == 3, 60,
               "the followers back in the ISR")


def fetched_offset(port: int, group: str) -> int:
    """The committed offset of partition 0 of TOPIC that OffsetFetch v5 answers, asked of one
    node (-1: none)."""
    client = RawClient(port)
    try:
        answer = client.call(offset_fetch, 5, group_id=group, topics=[
            offset_fetch.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    finally:
        client.close()
    return answer.topics[0].partitions[0].committed_offset


def listed_groups(port: int) -> set[str]:
    """The group ids ListGroups v2 answers, asked of one node."""
    client = RawClient(port)
    try:
        return {g.group_id for g in client.call(list_groups, 2).groups}
    finally:
        client.close()


def test_offset_fetch_answers_a_commit_only_once_it_is_replicated(fleet, zk):
    """A commit waits for its offsets partition's high watermark to pass it. Until then,
    OffsetFetch answers the offset committed before: the commit may still fail, and a reader
    that saw it would see the group's offset go back (Kafka: the coordinator's cache takes a
    commit when its append completes). Both followers paused, briefly (within
    replica.lag.time.max.ms and the session), hold the high watermark. A new group's first
    commit waits meanwhile too: the coordinator's sweep (every 0.1 s) must not take the group
    for one never used, or its offset would be lost once the commit lands."""
    target = 2
    group = groups_on(target, "offsets-visible")
    fresh = groups_on(target, "offsets-fresh")
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    if TOPIC not in admin.list_topics(timeout=30).topics:  # alone, not after the tests above
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    wait_until(lambda: find_coordinator(fleet[0].port, group)[0] == ErrorCode.NONE, 60,
               "a coordinator (the offsets topic made)")
    wait_until(lambda: len(partition_state(zk, OFFSETS, target)["isr"]) == 3, 60, "a full ISR")
    home = appliance_of(fleet, partition_state(zk, OFFSETS, target)["leader"])
    others = [a for a in fleet if a is not home]
    wait_until(lambda: simple_commit(home.port, group, 5) == ErrorCode.NONE, 30,
               "a first commit")
    paused = [pid for a in others for pid in (a.process.pid, *a.pids().values()) if pid > 0]
    outcome: list[ErrorCode] = []
    committing = threading.Thread(
        target=lambda: outcome.append(simple_commit(home.port, group, 9)), daemon=True)
    first: list[ErrorCode] = []
    first_committing = threading.Thread(
        target=lambda: first.append(simple_commit(home.port, fresh, 9)), daemon=True)
    answers = []
    for pid in paused:
        os.kill(pid, signal.SIGSTOP)
    try:
        committing.start()
        first_committing.start()
        until = time.monotonic() + 1.5
        while committing.is_alive() and time.monotonic() < until:
            answers.append(fetched_offset(home.port, group))
        assert committing.is_alive(), f"the commit was answered {outcome} with both " \
            "followers paused"
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
    assert answers and set(answers) == {5}, answers
    committing.join(30)
    first_committing.join(30)
    # answered NONE once the followers caught up; if the host was too slow for its timeout,
    # the commit failed and OffsetFetch must still answer the offset before it
    assert outcome and fetched_offset(home.port, group) == (9 if outcome == [ErrorCode.NONE]
                                                            else 5), outcome
    assert first and fetched_offset(home.port, fresh) == (9 if first == [ErrorCode.NONE]
                                                          else -1), first
    if first == [ErrorCode.NONE]:  # a group the coordinator keeps (and a snapshot restates)
        assert fresh in listed_groups(home.port)
    wait_until(lambda: len(partition_state(zk, OFFSETS, target)["isr"]) == 3, 60,
               "the followers in the ISR")


def _commit_or_error(consumer, offsets):
    try:
        consumer.commit(offsets)
        return None
    except Exception as exc:  # noqa: BLE001 - reported by the test
        return exc


class _Refusals(logging.Handler):
    """Whether kafka-python has been answered a retriable error to a commit of `group` (its
    coordinator logs each at debug level, then retries)."""

    def __init__(self, group: str):
        super().__init__(logging.DEBUG)
        self.group = group
        self.seen = False
        self.logger = logging.getLogger("kafka.coordinator.consumer")
        self.level_before = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if f"OffsetCommit for group {self.group} failed" in message:
            self.seen = True

    def close(self) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)
        super().close()
