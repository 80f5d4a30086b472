"""`klog groups` and the groups part of `klog status`, against a real two-worker appliance and
groups formed by real confluent-kafka consumers.

The numbers are the test's own: it produces a known count of records (with known CreateTime
timestamps) per partition and commits known offsets, so lag and reset targets are checked
against arithmetic, not against what the tool printed before.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from datetime import UTC, datetime

import orjson
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

import klog
from tests.conftest import REPO

pytestmark = pytest.mark.interop

RECORDS = 10  # per partition
T0_MS = 1_700_000_000_000  # CreateTime of offset 0; offset i is at T0_MS + i seconds
_names = itertools.count()


@pytest.fixture(scope="module")
def appliance(group_appliance):
    return group_appliance


def klog_cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def groups(appliance, *args):
    result = klog_cli("groups", "--bootstrap-server", appliance.bootstrap, *args)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def make_topic(appliance, partitions=2) -> str:
    """A topic with RECORDS records per partition; offset i has CreateTime T0_MS + i s."""
    name = f"events-{next(_names)}"
    with klog.Admin(appliance.bootstrap) as admin:
        admin.create_topic(name, partitions)
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(RECORDS):
            producer.produce(name, value=f"{partition}:{i}".encode(), partition=partition,
                             timestamp=T0_MS + i * 1000)
    assert producer.flush(30) == 0
    return name


def group_on(appliance, node: int) -> str:
    """A fresh group id that worker ``node`` coordinates (coordinators spread by hash)."""
    with klog.Admin(appliance.bootstrap) as admin:
        for _ in range(200):
            name = f"group-{next(_names)}"
            if admin.describe_groups([name])[name].coordinator == node:
                return name
    raise AssertionError(f"no group id lands on node {node}")


def join(appliance, group: str, topic: str, **conf) -> tuple[Consumer, list]:
    """A confluent-kafka consumer in ``group``, polled until it holds partitions; returns it
    and the messages it got meanwhile."""
    consumer = Consumer({"bootstrap.servers": appliance.bootstrap, "group.id": group,
                         "session.timeout.ms": 6000, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **conf})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        got += poll(consumer, 0.2)
    assert consumer.assignment(), "the consumer was given no partitions"
    return consumer, got


def poll(consumer: Consumer, timeout_s: float) -> list:
    message = consumer.poll(timeout_s)
    if message is None:
        return []
    assert message.error() is None, message.error()
    return [message]


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(offsets=[KafkaTopicPartition(topic, p, o) for p, o in offsets.items()],
                    asynchronous=False)


def committed(appliance, group: str) -> dict[int, int | None]:
    with klog.Admin(appliance.bootstrap) as admin:
        return {tp.partition: o for tp, o in admin.list_group_offsets(group).items()}


def describe_json(appliance, group: str) -> dict:
    result = groups(appliance, "describe", group, "--json")
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


def test_list_and_describe_show_members_and_lag(appliance):
    topic, group = make_topic(appliance), group_on(appliance, 0)
    consumer, _ = join(appliance, group, topic)
    try:
        commit(consumer, topic, {0: 4, 1: 7})
        listed = orjson.loads(groups(appliance, "list", "--json").stdout)
        assert {"group": group, "protocol_type": "consumer", "coordinator": 0} in listed
        assert group in groups(appliance, "list").stdout

        described = describe_json(appliance, group)
        assert described["state"] == "Stable" and described["protocol_type"] == "consumer"
        (member,) = described["members"]
        assert member["subscription"] == [topic]
        assert member["assignment"] == [{"topic": topic, "partition": 0},
                                        {"topic": topic, "partition": 1}]
        rows = {r["partition"]: r for r in described["partitions"]}
        assert [(rows[p]["committed"], rows[p]["log_end"], rows[p]["lag"]) for p in (0, 1)] \
            == [(4, RECORDS, RECORDS - 4), (7, RECORDS, RECORDS - 7)]
        assert {r["member_id"] for r in rows.values()} == {member["member_id"]}
        assert described["lag"] == (RECORDS - 4) + (RECORDS - 7)

        text = groups(appliance, "describe", group)
        assert text.returncode == 0 and "Stable" in text.stdout
        assert f"total lag: {(RECORDS - 4) + (RECORDS - 7)}" in text.stdout
    finally:
        consumer.close()


def test_an_active_group_is_neither_reset_nor_deleted(appliance):
    topic, group = make_topic(appliance), group_on(appliance, 1)
    consumer, _ = join(appliance, group, topic)
    try:
        commit(consumer, topic, {0: 2, 1: 3})
        for target in (["--to-earliest", "--execute"], ["--to-offset", "5", "--dry-run"]):
            refused = groups(appliance, "reset-offsets", group, "--topic", topic, *target)
            assert refused.returncode == 1
            assert "1 member(s)" in refused.stderr and "stop its consumers" in refused.stderr
        deleted = groups(appliance, "delete", group)
        assert deleted.returncode == 1 and "NON_EMPTY_GROUP" in deleted.stderr
        assert committed(appliance, group) == {0: 2, 1: 3}
    finally:
        consumer.close()


def test_reset_offsets_after_the_group_emptied(appliance):
    topic, group = make_topic(appliance), group_on(appliance, 0)
    consumer, _ = join(appliance, group, topic)
    commit(consumer, topic, {0: 5, 1: 6})
    consumer.close()

    def reset(*target):
        result = groups(appliance, "reset-offsets", group, "--topic", topic, *target)
        assert result.returncode == 0, result.stderr
        return result

    dry = reset("--to-earliest", "--dry-run")
    assert "dry run" in dry.stdout and committed(appliance, group) == {0: 5, 1: 6}
    assert "WARN" not in dry.stderr
    # Kafka's default: without --execute, only a preview (and a warning saying so)
    preview = reset("--to-earliest")
    assert "dry run" in preview.stdout and "--execute" in preview.stderr
    assert committed(appliance, group) == {0: 5, 1: 6}
    both = groups(appliance, "reset-offsets", group, "--topic", topic, "--to-earliest",
                  "--dry-run", "--execute")
    assert both.returncode == 2 and committed(appliance, group) == {0: 5, 1: 6}
    reset("--to-earliest", "--execute")
    assert committed(appliance, group) == {0: 0, 1: 0}
    reset("--to-latest", "--execute")
    assert committed(appliance, group) == {0: RECORDS, 1: RECORDS}
    reset("--to-offset", "3", "--partitions", "1", "--execute")
    assert committed(appliance, group) == {0: RECORDS, 1: 3}
    reset("--to-offset", "99", "--execute")  # beyond the log end: clamped, as Kafka's tool
    assert committed(appliance, group) == {0: RECORDS, 1: RECORDS}
    reset("--to-datetime", _iso(T0_MS + 1000 * 1000), "--execute")  # after the last record
    assert committed(appliance, group) == {0: RECORDS, 1: RECORDS}
    moved = reset("--to-datetime", _iso(T0_MS + 6500), "--partitions", "0,1", "--execute")
    assert committed(appliance, group) == {0: 7, 1: 7}  # first record at or after +6.5 s
    assert "10" in moved.stdout and "7" in moved.stdout  # old -> new per partition

    # A consumer that comes back starts where the reset put the group, not at its default.
    consumer, got = join(appliance, group, topic, **{"auto.offset.reset": "latest"})
    try:
        deadline = time.monotonic() + 30
        while len(got) < 2 * (RECORDS - 7) and time.monotonic() < deadline:
            got += poll(consumer, 0.2)
    finally:
        consumer.close()
    first = {}
    for message in got:
        first.setdefault(message.partition(), message.offset())
    assert first == {0: 7, 1: 7}
    assert sorted(m.value() for m in got) == sorted(
        f"{p}:{i}".encode() for p in (0, 1) for i in range(7, RECORDS))


def test_delete_removes_an_empty_group_and_its_offsets(appliance):
    topic, group = make_topic(appliance), group_on(appliance, 1)
    consumer, _ = join(appliance, group, topic)
    commit(consumer, topic, {0: 1})
    consumer.close()
    deleted = groups(appliance, "delete", group)
    assert deleted.returncode == 0 and f"group {group} deleted" in deleted.stdout
    assert group not in groups(appliance, "list").stdout
    assert committed(appliance, group) == {}
    gone = groups(appliance, "describe", group)
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    again = groups(appliance, "delete", group)
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr


def test_delete_offsets_as_kafka_consumer_groups(appliance):
    topic, group = make_topic(appliance), group_on(appliance, 0)
    consumer, _ = join(appliance, group, topic)
    try:
        commit(consumer, topic, {0: 3, 1: 4})
        kept = groups(appliance, "delete-offsets", group, "--topic", topic)
        assert kept.returncode == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in kept.stdout
        assert committed(appliance, group) == {0: 3, 1: 4}
    finally:
        consumer.close()
    done = groups(appliance, "delete-offsets", group, "--topic", topic, "--partitions", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{topic}\t1\tSuccessful" in done.stdout
    assert committed(appliance, group) == {0: 3}
    missing = groups(appliance, "delete-offsets", f"{group}-none", "--topic", topic)
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr


def test_errors_are_one_line_and_a_status(appliance, tmp_path):
    topic, group = make_topic(appliance, partitions=1), group_on(appliance, 0)
    missing_topic = groups(appliance, "reset-offsets", group, "--topic", "no-such-topic",
                           "--to-earliest")
    assert missing_topic.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing_topic.stderr
    missing_partition = groups(appliance, "reset-offsets", group, "--topic", topic,
                               "--partitions", "4", "--to-earliest")
    assert missing_partition.returncode == 1 and "no partition 4" in missing_partition.stderr
    bad_time = groups(appliance, "reset-offsets", group, "--topic", topic,
                      "--to-datetime", "yesterday")
    assert bad_time.returncode == 2 and "ISO 8601" in bad_time.stderr
    nowhere = klog_cli("groups", "--bootstrap-server", "127.0.0.1:1", "list")
    assert nowhere.returncode == 1 and nowhere.stderr.startswith("klog: ")
    assert "Traceback" not in nowhere.stderr


def test_status_shows_the_lag_reported_by_each_coordinator(appliance):
    topic = make_topic(appliance)
    by_node = {node: group_on(appliance, node) for node in (0, 1)}
    consumers = []
    try:
        for node, group in by_node.items():
            consumer, _ = join(appliance, group, topic)
            consumers.append(consumer)
            commit(consumer, topic, {0: 2 + node, 1: 5})
        expected = {group: (RECORDS - 2 - node) + (RECORDS - 5)
                    for node, group in by_node.items()}
        shown = _wait_for_status_groups(appliance, expected)
        for node, group in by_node.items():
            assert shown[group]["coordinator"] == node and shown[group]["members"] == 1
            assert {(p["partition"], p["committed"], p["log_end"], p["lag"])
                    for p in shown[group]["partitions"]} == {
                (0, 2 + node, RECORDS, RECORDS - 2 - node), (1, 5, RECORDS, RECORDS - 5)}
        text = klog_cli("status", "--config", str(appliance.config), "--interval", "0",
                        "--verbose")
        assert text.returncode == 0 and "Consumer groups" in text.stdout
        assert all(group in text.stdout for group in by_node.values())
    finally:
        for consumer in consumers:
            consumer.close()


def _wait_for_status_groups(appliance, expected: dict[str, int]) -> dict[str, dict]:
    """`klog status --json`'s groups once each expected group shows the expected total lag
    (the coordinators rewrite their reports every second)."""
    deadline = time.monotonic() + 10
    while True:
        result = klog_cli("status", "--config", str(appliance.config), "--json",
                          "--interval", "0")
        assert result.returncode == 0, result.stderr
        shown = {g["group"]: g for g in orjson.loads(result.stdout)["groups"]}
        if all(shown.get(g, {}).get("lag") == lag for g, lag in expected.items()):
            return shown
        assert time.monotonic() < deadline, f"status shows {shown}, expected lag {expected}"
        time.sleep(0.3)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()
