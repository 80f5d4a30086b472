"""The workload that runs throughout a fault test, and what it records for the checker.

- two producers writing numbered values (`<producer>-<seq>`) round-robin over the
  partitions at a moderate rate: confluent-kafka, idempotent with acks=all (`c`), and
  kafka-python with acks=all, not idempotent, one request in flight (`k`);
- a consumer group of two confluent-kafka members reading throughout and committing what
  they read (synchronously, every half second), and a third member (`resumer`) that joins
  at the end, once the two have left;
- an observer reading the group's committed offsets back every second;
- a ZooKeeper watch on every partition's state znode (leader, leader epoch, ISR).

`finish` stops it all in that order and adds a final read of every partition (kafka-python,
from offset 0 to the high watermark) and every replica's batches from disk.
"""

from __future__ import annotations

import contextlib
import time

import orjson
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tests.faults.checker import (
    Ack,
    Batch,
    Observations,
    Read,
    StateSeen,
    replicas_match_assignment,
)
from tests.faults.clients import (
    PARTITIONS,
    CommitObserver,
    ConfluentWriter,
    GroupMember,
    Journal,
    KafkaPythonWriter,
    Writer,
)
from tests.faults.fleet import NODES_PER_APPLIANCE, FaultFleet
from tests.fleet.harness import batch_headers
from tests.polling import wait_until

CONFLUENT_RATE = 150  # records per second
KAFKA_PYTHON_RATE = 40


class EpochWatcher:
    """Every version of every partition state znode, as ZooKeeper's watches deliver them."""

    def __init__(self, zk, topic: str):
        self.zk = zk
        self.topic = topic
        self.states = Journal()
        self._stopped = False
        from kazoo.recipe.watchers import DataWatch
        for partition in range(PARTITIONS):
            DataWatch(zk, f"/brokers/topics/{topic}/partitions/{partition}/state",
                      func=self._callback(partition))

    def _callback(self, partition: int):
        def seen(data, stat, *_):
            if self._stopped:
                return False  # removes the watch
            if data:
                state = orjson.loads(data)
                self.states.add(StateSeen(partition, stat.version, state["leader"],
                                          state["leader_epoch"], tuple(state["isr"])))
            return True
        return seen

    def isr_sizes(self, partition: int) -> list[int]:
        return [len(s.isr) for s in self.states.snapshot() if s.partition == partition]

    def stop(self) -> None:
        self._stopped = True


class Workload:
    """One test's workload on its own topic; `finish` returns what the checker needs."""

    def __init__(self, fleet: FaultFleet, name: str):
        self.fleet = fleet
        self.topic = f"faults-{name}"
        self.group = f"group-{name}"
        self.journal = Journal()
        bootstrap = fleet.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(self.topic, PARTITIONS, 3,
                                      config={"min.insync.replicas": "2"})])[self.topic].result(60)
        wait_until(lambda: not [p for t, p in fleet.under_replicated() if t == self.topic],
                   60, f"{self.topic}'s leaders and full ISRs")
        self.watcher = EpochWatcher(fleet.zk, self.topic)
        self.writers: list[Writer] = [ConfluentWriter(bootstrap, self.topic, CONFLUENT_RATE),
                                      KafkaPythonWriter(bootstrap, self.topic,
                                                        KAFKA_PYTHON_RATE)]
        self.members = [GroupMember(n, bootstrap, self.topic, self.group, self.journal)
                        for n in ("m1", "m2")]
        self.observer = CommitObserver(bootstrap, self.topic, self.group, self.journal)
        self.extra_acks: list[Ack] = []  # acknowledged by a test's own probes
        self.log_marks = fleet.log_marks()

    def start(self) -> Workload:
        for thread in (*self.writers, *self.members, self.observer):
            thread.start()
        self.wait_progress(300)
        return self

    def hold_commits(self, timeout_s: float = 60) -> int:
        """Every member stops committing once its commit in flight, if any, has ended; the
        journal's length then (what happens from there on)."""
        for member in self.members:
            member.hold()
        for member in self.members:
            wait_until(member.held.is_set, timeout_s, f"{member.member} to hold its commits")
        return len(self.journal.snapshot())

    def release_commits(self) -> None:
        for member in self.members:
            member.release()

    def join(self, name: str) -> GroupMember:
        """Another member joins the group (and stays until `finish`): a rebalance."""
        member = GroupMember(name, self.fleet.bootstrap, self.topic, self.group, self.journal)
        self.members.append(member)
        member.start()
        return member

    def resumed_since(self, mark: int) -> set[int]:
        """The partitions that a member was assigned after journal position `mark` and has
        read since: where the checker sees whether it resumed at the group's commits."""
        assigned, out = set(), set()
        for event in self.journal.snapshot()[mark:]:
            key = (event.member, event.partition)
            if event.kind == "assigned":
                assigned.add(key)
            elif event.kind == "revoked":
                assigned.discard(key)
            elif event.kind == "read" and key in assigned:
                out.add(event.partition)
        return out

    def acked(self) -> int:
        return sum(len(w.acks.items) for w in self.writers)

    def consumed(self) -> set[str]:
        return {e.value for e in self.journal.snapshot() if e.kind == "read"}

    def wait_progress(self, count: int, timeout_s: float = 120, *, read: bool = True) -> None:
        """Until `count` more records are acknowledged and (`read`) the group has read every
        record acknowledged so far."""
        target = self.acked() + count
        wait_until(lambda: self.acked() >= target, timeout_s,
                   f"{count} more acknowledgements")
        if read:
            acks = [a for w in self.writers for a in w.acks.snapshot()]
            values = {a.value for a in acks}
            try:
                wait_until(lambda: values <= self.consumed(), timeout_s,
                           "the group to read what was acknowledged")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {self.unread(acks)}") from None

    def unread(self, acks: list[Ack]) -> str:
        """What the group has not read of `acks`, and where each member of it is: for the
        message of a test that fails waiting for the group."""
        consumed = self.consumed()
        missing = sorted((a.partition, a.offset, a.value) for a in acks
                         if a.value not in consumed)
        owners: dict[int, str] = {}
        last: dict[int, int] = {}
        for event in self.journal.snapshot():
            if event.kind == "assigned":
                owners[event.partition] = event.member
            elif event.kind == "revoked" and owners.get(event.partition) == event.member:
                owners.pop(event.partition)
            elif event.kind == "read":
                last[event.partition] = event.offset
        by_partition = {}
        for p, offset, value in missing:
            by_partition.setdefault(p, []).append(f"{value}@{offset}")
        return "; ".join(
            f"partition {p} (owner {owners.get(p, 'none')}, last read at {last.get(p)}): "
            f"{len(found)} unread from {', '.join(found[:3])}"
            for p, found in sorted(by_partition.items()))

    def abort(self) -> None:
        """After a failed test: stop every thread of the workload without waiting long, and
        keep what it observed (`<topic>.aborted.json` in the fleet's directory)."""
        self.watcher.stop()
        for thread in (*self.writers, *self.members, self.observer):
            if thread.is_alive():
                thread.abort()
        seen = Observations(acks=[a for w in self.writers for a in w.acks.snapshot()],
                            group=self.journal.snapshot(),
                            states=self.watcher.states.snapshot())
        (self.fleet.workdir / f"{self.topic}.aborted.json").write_bytes(orjson.dumps(
            seen, default=sorted, option=orjson.OPT_NON_STR_KEYS))

    def errors(self) -> list[str]:
        return [e for w in self.writers for e in w.errors.snapshot()]

    def finish(self) -> Observations:
        """Stop the members (their last commits), let the writers go on a moment, stop them,
        read the committed offsets, run the resumer to the end, read every partition and
        every replica."""
        for member in self.members:
            member.stop()
        self.wait_progress(100, read=False)
        for writer in self.writers:
            writer.stop()
        self.observer.stop()
        observer = CommitObserver(self.fleet.bootstrap, self.topic, self.group, self.journal)
        observer.setup()
        final_committed = wait_until(observer.read, 60, "the group's committed offsets")
        observer.teardown()
        acks = [a for w in self.writers for a in w.acks.snapshot()] + self.extra_acks
        resumer = GroupMember("resumer", self.fleet.bootstrap, self.topic, self.group,
                              self.journal, commits=False)
        resumer.start()
        wanted = {a.value for a in acks}
        with contextlib.suppress(AssertionError):  # the checker names what is missing
            wait_until(lambda: wanted <= self.consumed(), 120,
                       "the group to have read every acknowledged record")
        resumer.stop()
        self.watcher.stop()
        holders = {p: [f"a{r // NODES_PER_APPLIANCE}" for r in replicas]
                   for p, replicas in self.fleet.assignment(self.topic).items()}
        return Observations(
            acks=acks, idempotent={"c"}, group=self.journal.snapshot(),
            final_read=read_everything(self.fleet.bootstrap, self.topic),
            final_committed=final_committed, states=self.watcher.states.snapshot(),
            replicas=settled_replicas(self.fleet, self.topic, holders), holders=holders)


def read_everything(bootstrap: str, topic: str, timeout_s: float = 120) -> dict[int, list[Read]]:
    """Every record of every partition, offset 0 to the high watermark (kafka-python)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             group_id=None, auto_offset_reset="earliest")
    partitions = [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(partitions)
    out: dict[int, list[Read]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(
            consumer.position(tp) < ends[tp] for tp in partitions):
        for tp, records in consumer.poll(timeout_ms=500, max_records=5000).items():
            out[tp.partition] += [Read(tp.partition, r.offset, r.value.decode(),
                                       getattr(r, "leader_epoch", None)) for r in records]
    consumer.close()
    return out


def settled_replicas(fleet: FaultFleet, topic: str, holders: dict[int, list[str]],
                     timeout_s: float = 60):
    """The replicas once those the assignment names hold the same batches and no other
    appliance holds any, read twice in a row (the writers have stopped; followers may still
    be copying the last batches, or be in the middle of one, and a replica moved away may
    not be deleted yet); or as they are after `timeout_s`, for the checker to name."""
    previous = replicas_on_disk(fleet, topic)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = replicas_on_disk(fleet, topic)
        if current == previous and not replicas_match_assignment(current, holders):
            break
        previous = current
    return previous


def replicas_on_disk(fleet: FaultFleet, topic: str) -> dict[str, dict[int, list[Batch]]]:
    """Appliance name -> partition -> its replica's batches (from its segment files)."""
    out: dict[str, dict[int, list[Batch]]] = {}
    for broker_id, appliance in fleet.appliances.items():
        partitions = {}
        for disk in appliance.log_dirs:
            for p in range(PARTITIONS):
                directory = disk / f"{topic}-{p}"
                if directory.is_dir():
                    partitions[p] = [
                        Batch(h.base_offset, h.base_offset + h.last_offset_delta,
                              h.partition_leader_epoch, h.crc)
                        for path in sorted(directory.glob("*.log"))
                        for h in batch_headers(path.read_bytes())]
        out[f"a{broker_id}"] = partitions
    return out
