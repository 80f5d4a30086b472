"""The clients of the fault tests' workload, each a thread that records what it saw.

- `ConfluentWriter` (`c`): confluent-kafka, idempotent, acks=all;
- `KafkaPythonWriter` (`k`): kafka-python, acks=all, not idempotent, one request in flight;
  both write numbered values (`<producer>-<seq>`) round-robin over the partitions at a
  steady rate, and record each acknowledgement (partition, offset) and each error;
- `GroupMember`: a confluent-kafka consumer in the group, reading and committing what it
  read (synchronously, every half second), recording assignments, reads and commits (each
  attempt as it starts, then acknowledged or failed) in the group's journal; a test can hold
  its commits for a while (`holding`);
- `CommitObserver`: reads the group's committed offsets back every second.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from tests.faults.checker import Ack, GroupEvent

PARTITIONS = 6
COMMIT_INTERVAL_S = 0.5


class Journal:
    """A list that several threads append to, in the order they do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list = []

    def add(self, item) -> None:
        with self.lock:
            self.items.append(item)

    def snapshot(self) -> list:
        with self.lock:
            return list(self.items)


class _Loop(threading.Thread):
    """A thread running `step` until stopped."""

    def __init__(self, name: str):
        super().__init__(name=name, daemon=True)
        self.stopping = threading.Event()
        self.aborting = False

    def run(self) -> None:
        self.setup()
        while not self.stopping.is_set():
            self.step()
        self.teardown()

    def setup(self) -> None:
        pass

    def step(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        pass

    def stop(self, timeout_s: float = 200) -> None:
        self.stopping.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"{self.name} did not stop; it is at:\n{self.where()}"

    def where(self) -> str:
        """The thread's stack as it is now (why a stop failed)."""
        frame = sys._current_frames().get(self.ident)
        return "".join(traceback.format_stack(frame)) if frame else "(no frame)"

    def abort(self) -> None:
        """Stop without waiting for what is still in flight (a test that failed)."""
        self.aborting = True
        self.stopping.set()
        self.join(30)


class Writer(_Loop):
    """Numbered values at `rate` per second; `acks` and `errors` as the client reports."""

    name_prefix = "?"

    def __init__(self, bootstrap: str, topic: str, rate: float):
        super().__init__(f"writer-{self.name_prefix}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.acks = Journal()
        self.errors = Journal()
        self.sent = 0
        self._started_at = 0.0

    def setup(self) -> None:
        self._started_at = time.monotonic()

    def step(self) -> None:
        ahead = self._started_at + self.sent / self.rate - time.monotonic()
        if ahead > 0:  # read once: a second clock read may be past `due`, and a negative
            self.idle(ahead)  # timeout is librdkafka's "wait forever" (poll(-1))
            return
        seq = self.sent
        self.send(seq, f"{self.name_prefix}-{seq}".encode(), seq % PARTITIONS)
        self.sent += 1

    def acked(self, seq: int, partition: int, offset: int) -> None:
        self.acks.add(Ack(self.name_prefix, seq, partition, offset))

    def idle(self, seconds: float) -> None:
        time.sleep(min(seconds, 0.05))

    def send(self, seq: int, value: bytes, partition: int) -> None:
        raise NotImplementedError


class ConfluentWriter(Writer):
    name_prefix = "c"

    def setup(self) -> None:
        super().setup()
        self.producer = Producer({
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 180_000, "retry.backoff.ms": 100})

    def send(self, seq: int, value: bytes, partition: int) -> None:
        def delivered(err, msg, seq=seq):
            if err is None:
                self.acked(seq, msg.partition(), msg.offset())
            else:
                self.errors.add(f"c-{seq}: {err}")
        while True:
            try:
                self.producer.produce(self.topic, value, partition=partition,
                                      on_delivery=delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def idle(self, seconds: float) -> None:
        self.producer.poll(min(seconds, 0.05))

    def teardown(self) -> None:
        left = self.producer.flush(1 if self.aborting else 180)
        if left:
            self.errors.add(f"{left} records still undelivered after 180 s")
        self.producer = None  # librdkafka's threads end with the last reference


class KafkaPythonWriter(Writer):
    name_prefix = "k"

    def setup(self) -> None:
        super().setup()
        self.producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), acks="all", enable_idempotence=False,
            max_in_flight_requests_per_connection=1, linger_ms=5, retry_backoff_ms=100,
            delivery_timeout_ms=180_000, request_timeout_ms=30_000)

    def send(self, seq: int, value: bytes, partition: int) -> None:
        future = self.producer.send(self.topic, value, partition=partition)
        future.add_callback(lambda meta, seq=seq: self.acked(seq, meta.partition, meta.offset))
        future.add_errback(lambda exc, seq=seq: self.errors.add(f"k-{seq}: {exc!r}"))

    def teardown(self) -> None:
        if not self.aborting:
            self.producer.flush(180)
        self.producer.close(1 if self.aborting else 10)


class GroupMember(_Loop):
    """A member of the group: subscribes, reads, commits what it read twice a second (unless
    `commits` is false: the resumer only shows where the group resumes)."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, journal: Journal,
                 *, commits: bool = True):
        super().__init__(f"member-{name}")
        self.commits = commits
        self.member = name
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.journal = journal
        self.position: dict[int, int] = {}  # owned partition -> next offset to commit
        self.committed: dict[int, int] = {}
        self._last_commit = 0.0
        self._attempts = 0
        self.holding = threading.Event()  # set by a test: commit nothing until it is cleared
        self.held = threading.Event()  # set here once holding and no commit is in flight

    def setup(self) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "client.id": self.member, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000, "partition.assignment.strategy": "range"})
        self.consumer.subscribe([self.topic], on_assign=self._assigned,
                                on_revoke=self._revoked, on_lost=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        for tp in partitions:
            self.journal.add(GroupEvent(self.member, "assigned", tp.partition))

    def _revoked(self, consumer, partitions) -> None:
        for tp in partitions:
            self.position.pop(tp.partition, None)
            self.committed.pop(tp.partition, None)
            self.journal.add(GroupEvent(self.member, "revoked", tp.partition))

    def step(self) -> None:
        for message in self.consumer.consume(200, timeout=0.2):
            if message.error():
                continue
            p = message.partition()
            epoch = message.leader_epoch()
            self.journal.add(GroupEvent(self.member, "read", p, message.offset(),
                                        message.value().decode(), epoch))
            self.position[p] = message.offset() + 1
        if self.holding.is_set():
            self.held.set()
        elif self.commits and time.monotonic() - self._last_commit >= COMMIT_INTERVAL_S:
            self.commit()

    def hold(self) -> None:
        """Commit nothing from now on (the commit in flight, if any, ends first)."""
        self.holding.set()

    def release(self) -> None:
        self.held.clear()
        self.holding.clear()

    def commit(self) -> None:
        """Commit the positions that moved. The journal has each attempt (`committing`, its
        id in `value`) before it is sent, then `committed` or `commit-failed` with the same
        id: a failed attempt may still have landed."""
        self._last_commit = time.monotonic()
        pending = [TopicPartition(self.topic, p, o) for p, o in self.position.items()
                   if self.committed.get(p) != o]
        if not pending:
            return
        self._attempts += 1
        attempt = f"{self.member}#{self._attempts}"
        for tp in pending:
            self.journal.add(GroupEvent(self.member, "committing", tp.partition, tp.offset,
                                        attempt))
        try:
            done = self.consumer.commit(offsets=pending, asynchronous=False) or []
        except KafkaException:
            done = []
        acknowledged = {tp.partition for tp in done if tp.error is None}
        for tp in pending:
            if tp.partition in acknowledged:
                if tp.partition in self.position:
                    self.committed[tp.partition] = tp.offset
                self.journal.add(GroupEvent(self.member, "committed", tp.partition,
                                            tp.offset, attempt))
            else:
                self.journal.add(GroupEvent(self.member, "commit-failed", tp.partition,
                                            tp.offset, attempt))

    def teardown(self) -> None:
        if self.commits and not self.aborting and not self.holding.is_set():
            self.commit()
        self.consumer.close()


class CommitObserver(_Loop):
    """Reads the group's committed offsets back every second (a consumer outside it)."""

    def __init__(self, bootstrap: str, topic: str, group: str, journal: Journal):
        super().__init__("commit-observer")
        self.bootstrap, self.topic, self.group, self.journal = bootstrap, topic, group, journal

    def setup(self) -> None:
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                  "enable.auto.commit": False})

    def read(self, timeout_s: float = 5) -> dict[int, int] | None:
        try:
            found = self.consumer.committed(
                [TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=timeout_s)
        except KafkaException:
            return None
        out = {tp.partition: tp.offset for tp in found if tp.error is None and tp.offset >= 0}
        for p, offset in sorted(out.items()):
            self.journal.add(GroupEvent("observer", "observed", p, offset))
        return out

    def step(self) -> None:
        self.read()
        self.stopping.wait(1.0)

    def teardown(self) -> None:
        self.consumer.close()
