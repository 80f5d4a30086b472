"""Consumer groups against a real two-worker appliance, with real clients in real processes:
confluent-kafka (librdkafka), kafka-python, aiokafka, klog's own consumer and kcat."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import confluent_kafka as ck
import pytest

from klog.protocol.apis import find_coordinator
from klog.wire import connect_any
from tests.conftest import FAST_GROUPS, require_binary
from tests.groups.members import MemberProcess, overlaps
from tests.interop.helpers import create_topic
from tests.polling import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]

SESSION_MS = 6000


@pytest.fixture
def appliance(appliance_factory):
    return appliance_factory(log_dirs=2, settings=FAST_GROUPS)


class Producer(threading.Thread):
    """confluent-kafka producing unique values ("n") at a steady pace until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: int = 500):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.rate = topic, rate_per_s
        self.acked: set[str] = set()
        self.stopping = threading.Event()

    def _delivered(self, error, message):
        if error is None:
            self.acked.add(message.value().decode())

    def run(self):
        n = 0
        while not self.stopping.is_set():
            for _ in range(self.rate // 20):
                self.producer.produce(self.topic, key=str(n % 97), value=str(n),
                                      on_delivery=self._delivered)
                n += 1
            self.producer.poll(0)
            time.sleep(0.05)
        assert self.producer.flush(30) == 0

    def stop(self):
        self.stopping.set()
        self.join(60)


def committed_and_end(bootstrap, group, topic, partitions):
    probe = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [ck.TopicPartition(topic, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in probe.committed(tps, timeout=10)}
        ends = {p: probe.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        return committed, ends
    finally:
        probe.close()


def start_members(tmp_path, bootstrap, group, topic, clients, **kwargs):
    return [MemberProcess(client, bootstrap, group, topic, tmp_path / f"{group}-{i}-{client}.log",
                          **kwargs)
            for i, client in enumerate(clients)]


def describe(members):
    return "\n".join(f"{m.client}: owns {sorted(m.owned())}\n{m.stderr_text()}" for m in members)


def test_four_clients_share_a_topic_and_survive_a_kill(appliance, tmp_path):
    topic, group, partitions = "clicks", "mixed", 12
    create_topic(appliance.bootstrap, topic, partitions)
    producer = Producer(appliance.bootstrap, topic)
    producer.start()
    members = start_members(tmp_path, appliance.bootstrap, group, topic,
                            ["confluent", "kafka-python", "aiokafka", "klog"],
                            session_ms=SESSION_MS)
    try:
        def balanced():
            owned = [m.owned() for m in members]
            return (all(len(o) == 3 for o in owned) and
                    set().union(*owned) == set(range(partitions)))

        wait_until(balanced, 60, "four members with three partitions each")
        victim = members[1]  # kafka-python
        lost = victim.owned()
        victim.kill9()
        survivors = [m for m in members if m is not victim]

        def moved():
            owned = [m.owned() for m in survivors]
            return sum(len(o) for o in owned) == partitions and \
                set().union(*owned) == set(range(partitions))

        wait_until(moved, SESSION_MS / 1000 + 10, f"partitions {sorted(lost)} to move")
        moved_after = time.monotonic() - victim.killed_at
        print(f"\npartitions {sorted(lost)} moved {moved_after:.2f} s after the kill "
              f"(session timeout {SESSION_MS / 1000:.0f} s)")
        assert moved_after < SESSION_MS / 1000 + 8, describe(members)
        time.sleep(2)
        producer.stop()
        assert len(producer.acked) > 1000

        def caught_up():
            committed, ends = committed_and_end(appliance.bootstrap, group, topic, partitions)
            return committed == ends and sum(ends.values()) == len(producer.acked)

        wait_until(caught_up, 60, "committed offsets to reach the log end", interval_s=0.5)
    finally:
        producer.stopping.set()
        codes = [m.stop() for m in members]
    assert codes[1] == -9 and [c for i, c in enumerate(codes) if i != 1] == [0, 0, 0], \
        describe(members)
    consumed = set().union(*(m.consumed() for m in members))
    assert producer.acked <= consumed, f"{len(producer.acked - consumed)} never consumed"
    assert not overlaps(members), overlaps(members)[:5]


def test_two_groups_each_see_every_message(appliance, tmp_path):
    topic = "shared"
    create_topic(appliance.bootstrap, topic, 6)
    producer = ck.Producer({"bootstrap.servers": appliance.bootstrap})
    values = {str(n) for n in range(3000)}
    for value in values:
        producer.produce(topic, key=value, value=value)
    assert producer.flush(30) == 0
    first = start_members(tmp_path, appliance.bootstrap, "first", topic,
                          ["confluent", "klog"], session_ms=SESSION_MS)
    second = start_members(tmp_path, appliance.bootstrap, "second", topic,
                           ["aiokafka"], session_ms=SESSION_MS)
    try:
        for members in (first, second):
            wait_until(lambda ms=members: set().union(*(m.consumed() for m in ms)) >= values,
                       60, "every message in each group")
    finally:
        for m in first + second:
            assert m.stop() == 0, m.stderr_text()
    for members in (first, second):
        seen = set().union(*(m.consumed() for m in members))
        assert seen == values
    assert not overlaps(first)


def test_kcat_balanced_consumer_joins_a_group_and_commits(appliance):
    kcat = require_binary("kcat")
    topic, group = "kcat-group", "kcat-g"
    create_topic(appliance.bootstrap, topic, 4)
    producer = ck.Producer({"bootstrap.servers": appliance.bootstrap})
    for n in range(400):
        producer.produce(topic, key=str(n), value=f"v{n}")
    assert producer.flush(30) == 0
    result = subprocess.run(
        [kcat, "-b", appliance.bootstrap, "-G", group, topic, "-o", "beginning", "-c", "400",
         "-q", "-f", "%p %o %s\n", "-X", "auto.commit.interval.ms=100",
         "-X", f"session.timeout.ms={SESSION_MS}"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split()
    assert sorted(lines[2::3], key=lambda v: int(v[1:])) == [f"v{n}" for n in range(400)]
    committed, ends = committed_and_end(appliance.bootstrap, group, topic, 4)
    assert committed == ends  # kcat commits what it consumed when it closes


def test_static_member_restart_does_not_rebalance_the_others(appliance, tmp_path):
    topic, group = "static", "static-g"
    create_topic(appliance.bootstrap, topic, 6)
    session_ms = 20_000
    members = [MemberProcess("confluent", appliance.bootstrap, group, topic,
                             tmp_path / f"static-{i}.log", instance_id=f"instance-{i}",
                             session_ms=session_ms) for i in range(3)]
    try:
        wait_until(lambda: all(len(m.owned()) == 2 for m in members), 60,
                   "three static members with two partitions each")
        time.sleep(1)
        before = [len(m.events()) for m in members]
        restarted = members[2]
        had = restarted.owned()
        restarted.kill9()
        again = MemberProcess("confluent", appliance.bootstrap, group, topic,
                              tmp_path / "static-2-again.log", instance_id="instance-2",
                              session_ms=session_ms)
        members.append(again)
        wait_until(lambda: again.owned(), 30, "the restarted member's assignment")
        assert again.owned() == had
        time.sleep(3)
        for m, count in zip(members[:2], before[:2]):
            rebalances = [e for e in m.events()[count:] if e["event"] in ("assign", "revoke")]
            assert rebalances == [], f"{m.out.name} was rebalanced: {rebalances}"
    finally:
        for m in members:
            m.stop()


def test_committed_offsets_survive_a_coordinator_kill_and_an_appliance_restart(
        appliance, tmp_path):
    topic, group = "durable", "durable-g"
    create_topic(appliance.bootstrap, topic, 3)
    consumer = ck.Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                            "enable.auto.commit": False})
    wanted = [ck.TopicPartition(topic, p, 100 + p) for p in range(3)]
    consumer.commit(offsets=wanted, asynchronous=False)
    consumer.close()

    def committed():
        probe = ck.Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group})
        try:
            found = probe.committed([ck.TopicPartition(topic, p) for p in range(3)],
                                    timeout=20)
            return {tp.partition: tp.offset for tp in found}
        finally:
            probe.close()

    expected = {p: 100 + p for p in range(3)}
    assert committed() == expected
    coordinator = _coordinator_worker(appliance, group)
    old_pid = appliance.worker_pid(coordinator)
    os.kill(old_pid, signal.SIGKILL)
    wait_until(lambda: appliance.pids().get(coordinator) not in (None, 0, old_pid), 30,
               "the coordinator's worker to restart")
    wait_until(lambda: appliance._all_serving(), 30, "every worker serving")
    assert committed() == expected
    assert appliance.stop() == 0
    appliance.start()
    assert committed() == expected


def _coordinator_worker(appliance, group) -> int:
    connection = connect_any(appliance.bootstrap)
    try:
        answer = connection.call(find_coordinator, key=group, key_type=0)
    finally:
        connection.close()
    assert answer.error_code == 0
    return answer.node_id % 100
