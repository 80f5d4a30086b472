"""Consumer groups of klog consumers against a real two-worker appliance: partitions split
without overlap and handed over, commits that survive a restart, pattern subscriptions,
static membership, cooperative rebalancing, the heartbeat thread, the asyncio twin, a group
shared with confluent-kafka (librdkafka), and ``klog consume --group``."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

import klog
import klog.aio
from klog import TopicPartition as TP
from tests.client.test_cli import klog_cli

FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=300, auto_offset_reset="earliest",
            request_timeout_ms=10_000)
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(group_appliance):
    return group_appliance


@pytest.fixture
def topic(broker):
    def make(partitions: int = 4, records: int = 0, name: str | None = None) -> str:
        name = name or f"groups-{next(_names)}"
        with klog.Admin(broker.bootstrap) as admin:
            admin.create_topic(name, partitions)
        if records:
            produce(broker, name, records)
        return name

    return make


def produce(broker, topic: str, count: int, start: int = 0) -> None:
    with klog.Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(start, start + count):
            producer.send(topic, b"%d" % i, key=b"k%d" % i)
        producer.flush()


class Member:
    """A klog consumer with what it read and what its listeners saw."""

    def __init__(self, broker, group: str, topics=None, pattern=None, **options):
        self.consumer = klog.Consumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                      **{**FAST, **options})
        self.values: list[bytes] = []
        self.events: list[tuple[str, list[TP]]] = []
        self.consumer.subscribe(topics, pattern, on_assign=self._log("assign"),
                                on_revoke=self._log("revoke"), on_lost=self._log("lost"))

    def _log(self, what):
        return lambda partitions: self.events.append((what, sorted(partitions)))

    def poll(self, timeout_ms: int = 50) -> None:
        for records in self.consumer.poll(timeout_ms).values():
            self.values.extend(r.value for r in records)

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members, done, timeout_s: float = 30.0) -> float:
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout_s, [m.events for m in members]
        for m in members:
            m.poll()
    return time.monotonic() - start


def poll_for(members, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in members:
            m.poll()


def split(members, count: int) -> bool:
    owned = [m.owned() for m in members]
    return all(owned) and sum(map(len, owned)) == count and set().union(*owned) == set(
        range(count))


def test_two_members_split_a_topic_and_one_takes_over_when_the_other_leaves(broker, topic):
    name = topic(6, records=120)
    a, b = Member(broker, "split", [name]), Member(broker, "split", [name])
    poll_until([a, b], lambda: split([a, b], 6) and len(a.values) + len(b.values) >= 120)
    assert a.owned().isdisjoint(b.owned())
    read = a.values + b.values
    assert sorted(read) == sorted(b"%d" % i for i in range(120))  # none twice: commit on revoke
    b.consumer.close()
    assert b.events[-1][0] == "revoke"
    poll_until([a], lambda: a.owned() == set(range(6)))
    produce(broker, name, 30, start=120)
    poll_until([a], lambda: len(a.values) >= len(read) - len(b.values) + 30)
    assert sorted(a.values[-30:]) == sorted(b"%d" % i for i in range(120, 150))
    a.consumer.close()


def test_commits_survive_a_restart(broker, topic):
    name = topic(2, records=40)
    first = Member(broker, "restart", [name], enable_auto_commit=False)
    poll_until([first], lambda: len(first.values) >= 40)
    positions = {tp: first.consumer.position(tp) for tp in first.consumer.assignment()}
    first.consumer.commit()
    assert first.consumer.committed(list(positions)) == positions
    first.consumer.commit({TP(name, 0): klog.OffsetAndMetadata(positions[TP(name, 0)] - 5,
                                                               "five back")})
    first.consumer.close()
    second = Member(broker, "restart", [name])
    assert second.consumer.committed(TP(name, 0)) == {TP(name, 0): positions[TP(name, 0)] - 5}
    poll_until([second], lambda: len(second.values) >= 5)
    poll_for([second], 0.5)
    assert len(second.values) == 5 and set(second.values) <= set(first.values)
    second.consumer.close()  # auto-commit on close
    with klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="restart") as probe:
        assert probe.committed([TP(name, 0), TP(name, 1)]) == positions


def test_iteration_commits_exactly_what_was_handed_out(broker, topic):
    name = topic(1, records=20)
    with klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="iterate",
                       consumer_timeout_ms=10_000, **FAST) as consumer:
        consumer.subscribe(name)
        offsets = []
        for record in consumer:
            offsets.append(record.offset)
            if len(offsets) == 7:  # mid-chunk: the fetched rest must not count as consumed
                break
        assert offsets == list(range(7))
    with klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="iterate") as probe:
        assert probe.committed(TP(name, 0)) == {TP(name, 0): 7}


def test_an_assign_only_consumer_commits_and_resumes_with_its_group(broker, topic):
    name = topic(1, records=10)
    options = dict(bootstrap_servers=broker.bootstrap, group_id="assigned", **FAST)
    with klog.Consumer(**options) as consumer:
        consumer.assign([TP(name, 0)])
        assert len(consumer.poll(5000, max_records=4)[TP(name, 0)]) == 4
        consumer.commit()  # generation -1, no member id: Kafka's "simple" commit
    with klog.Consumer(**options) as consumer:
        consumer.assign([TP(name, 0)])
        assert consumer.position(TP(name, 0)) == 4
        assert consumer.committed([TP(name, 0), TP(name, 9)]) == {TP(name, 0): 4,
                                                                   TP(name, 9): None}


def test_a_pattern_subscription_picks_up_a_new_matching_topic(broker, topic):
    stem = f"pattern-{next(_names)}"
    topic(2, records=10, name=f"{stem}-a")
    topic(1, records=3, name=f"other-{stem}")
    member = Member(broker, "patterns", pattern=rf"{stem}-.*", metadata_max_age_ms=500)
    poll_until([member], lambda: len(member.values) >= 10)
    assert member.consumer.subscription() == {f"{stem}-a"}
    topic(3, records=7, name=f"{stem}-b")
    poll_until([member], lambda: len(member.values) >= 17)
    assert member.consumer.subscription() == {f"{stem}-a", f"{stem}-b"}
    assert len(member.consumer.assignment()) == 5
    member.consumer.close()


def test_a_static_member_gets_its_partitions_back_without_a_rebalance(broker, topic):
    name = topic(4)
    a = Member(broker, "static", [name], group_instance_id="a")
    b = Member(broker, "static", [name], group_instance_id="b")
    poll_until([a, b], lambda: split([a, b], 4))
    before, b_events = a.owned(), list(b.events)
    a.consumer.close()  # no LeaveGroup: the partitions wait for "a" until its session ends
    poll_for([b], 1)
    again = Member(broker, "static", [name], group_instance_id="a")
    poll_until([again, b], lambda: again.owned())
    poll_for([again, b], 1)
    assert again.owned() == before
    assert b.events == b_events  # b saw no rebalance
    again.consumer.close()
    b.consumer.close()


def test_cooperative_sticky_moves_only_what_must_move(broker, topic):
    name = topic(4)
    options = dict(partition_assignment_strategy=["cooperative-sticky"])
    a = Member(broker, "cooperative", [name], **options)
    poll_until([a], lambda: a.owned() == set(range(4)))
    b = Member(broker, "cooperative", [name], **options)
    poll_until([a, b], lambda: split([a, b], 4) and len(b.owned()) == 2)
    revoked = [set(ps) for what, ps in a.events if what == "revoke"]
    assert revoked == [{TP(name, p) for p in b.owned()}]  # only what moved, once
    assert not any(what == "revoke" for what, _ in b.events)
    moved = b.owned()
    b.consumer.close()
    poll_until([a], lambda: a.owned() == set(range(4)))
    assert a.events[-1] == ("assign", sorted(TP(name, p) for p in moved))  # the added ones
    a.consumer.close()


@pytest.mark.slow
def test_slow_processing_keeps_the_membership_a_missed_poll_interval_does_not(broker, topic):
    name = topic(2)
    slow = Member(broker, "slow", [name], max_poll_interval_ms=9000)
    other = Member(broker, "slow", [name])
    poll_until([slow, other], lambda: split([slow, other], 2))
    mine, events = slow.owned(), list(other.events)
    time.sleep(7)  # longer than the 6 s session: the heartbeat threads keep both members
    poll_for([slow, other], 0.5)
    assert slow.owned() == mine and other.events == events
    time.sleep(10)  # beyond max_poll_interval_ms: the thread leaves, "other" takes over
    poll_until([other], lambda: len(other.owned()) == 2)
    poll_until([slow, other], lambda: split([slow, other], 2))  # it rejoins at its next poll
    assert ("lost", [TP(name, p) for p in sorted(mine)]) in slow.events
    slow.consumer.close()
    other.consumer.close()


@pytest.mark.interop
def test_klog_and_librdkafka_share_a_group(broker, topic):
    ck = pytest.importorskip("confluent_kafka")
    name = topic(4, records=40)
    theirs = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mixed",
                          "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                          "partition.assignment.strategy": "range"})
    theirs.subscribe([name])
    ours = Member(broker, "mixed", [name])
    got_theirs: list[bytes] = []
    start = time.monotonic()
    while not (ours.owned() and theirs.assignment() and len(ours.values) + len(got_theirs) >= 40):
        assert time.monotonic() - start < 30
        ours.poll()
        message = theirs.poll(0.05)
        if message is not None and message.error() is None:
            got_theirs.append(message.value())
    their_partitions = {tp.partition for tp in theirs.assignment()}
    assert their_partitions.isdisjoint(ours.owned())
    assert their_partitions | ours.owned() == set(range(4))
    assert sorted(ours.values + got_theirs) == sorted(b"%d" % i for i in range(40))
    theirs.close()
    ours.consumer.close()


@pytest.mark.slow
def test_the_asyncio_consumer_does_the_same(broker, topic):
    name = topic(4, records=40)

    async def member(events):
        consumer = klog.aio.AIOConsumer(bootstrap_servers=broker.bootstrap, group_id="aio",
                                        **FAST)

        async def on_revoke(partitions):  # a coroutine listener may commit
            await consumer.commit()
            events.append(("revoke", sorted(partitions)))

        consumer.subscribe([name], on_assign=lambda ps: events.append(("assign", sorted(ps))),
                           on_revoke=on_revoke)
        return consumer

    async def main():
        events_a, events_b = [], []
        a, b = await member(events_a), await member(events_b)
        values = []
        start = time.monotonic()
        while not (a.assignment() and b.assignment() and len(values) >= 40):
            assert time.monotonic() - start < 30, (events_a, events_b)
            for consumer in (a, b):
                for records in (await consumer.poll(50)).values():
                    values.extend(r.value for r in records)
        assert a.assignment().isdisjoint(b.assignment())
        assert len(a.assignment() | b.assignment()) == 4
        assert sorted(values) == sorted(b"%d" % i for i in range(40))
        await a.commit()
        committed = await a.committed(a.assignment())
        assert committed == {tp: await a.position(tp) for tp in a.assignment()}
        await b.close()
        while len(a.assignment()) < 4:
            assert time.monotonic() - start < 30
            await a.poll(50)
        before = list(events_a)
        await asyncio.sleep(7)  # > session_timeout_ms: the heartbeat task keeps the session
        for _ in range(5):
            await a.poll(100)
        assert events_a == before and len(a.assignment()) == 4
        await a.unsubscribe()
        assert a.assignment() == set() and events_a[-1][0] == "revoke"
        await a.close()

    asyncio.run(main())


def test_klog_consume_with_a_group(broker, topic):
    name = topic(2, records=20)
    first = klog_cli("consume", "-b", broker.bootstrap, "-t", name, "--group", "cli",
                     "--from-beginning", "--max-messages", "12")
    assert first.returncode == 0, first.stderr.decode()
    rest = klog_cli("consume", "-b", broker.bootstrap, "-t", name, "-G", "cli", "-e")
    assert rest.returncode == 0, rest.stderr.decode()
    assert sorted(first.stdout.split() + rest.stdout.split()) == sorted(
        b"%d" % i for i in range(20))
    with klog.Consumer(bootstrap_servers=broker.bootstrap, group_id="cli") as probe:
        assert sum(probe.committed([TP(name, 0), TP(name, 1)]).values()) == 20
    bad = klog_cli("consume", "-b", broker.bootstrap, "-t", name, "-G", "cli", "-p", "0")
    assert bad.returncode == 2 and b"--partition" in bad.stderr
