"""A change of some partitions of a topic reaches the workers as those partitions
(`PartitionsChanged`), not as the whole topic (issue 26: a controller's failover rewrites every
partition an appliance held, 200 to a note; with one topic of 10,000 partitions each note sent
every worker all 10,000, and each worker took all 10,000 again).

From the fleet's views through the real `FleetRelay` and `ControlServer`, over a socketpair,
to a real `ControlPlaneClient`: what the worker holds after each broadcast equals what the
relay told, the listener hears which partitions changed, and a topic whose configs or size
changed, or most of whose partitions did, still goes whole."""

from __future__ import annotations

import socket

import pytest

from appliance.control.channel import (
    ControlChannelError,
    MessageReader,
    PartitionsChanged,
    TopicChanged,
    encode,
)
from appliance.control.client import ControlPlaneClient
from appliance.control.fleet import FleetRelay, FleetTopic, FleetView
from appliance.control.server import ControlServer
from appliance.control.topics import FleetNode, PartitionLeadership, TopicInfo
from appliance.segments.config import LogConfig

BROKER_ID = 2
NODES = {n: FleetNode(n, "127.0.0.1", 9000 + n) for n in (100, 101, 200, 201, 300, 301)}
PARTITIONS = 10


def lead(leader: int, *isr: int, epoch: int = 0) -> PartitionLeadership:
    replicas = (100, 200, 300) if leader % 2 == 0 else (101, 201, 301)
    return PartitionLeadership(leader, epoch, replicas, isr or replicas)


def topic(*states: PartitionLeadership, name="big", configs=None) -> FleetTopic:
    return FleetTopic(name, tuple(states), configs or {})


class Fleet:
    def __init__(self, *topics: FleetTopic):
        self.current = FleetView(NODES, {t.name: t for t in topics}, 1, {})

    def show(self, *topics: FleetTopic) -> None:
        self.current = FleetView(NODES, {t.name: t for t in topics}, 1, {})

    def view(self) -> FleetView:
        return self.current


class Worker:
    """A worker's end: the real client, and what its topic listener heard."""

    def __init__(self, sock: socket.socket):
        self.client = ControlPlaneClient(sock, defaults=LogConfig(), default_partitions=1)
        self.heard: list[tuple] = []
        self.client.add_listener(lambda *args: self.heard.append(args))
        self.client.wait_for_catalog()
        sock.setblocking(False)

    def take(self) -> None:
        self.client.pump()


@pytest.fixture
def setup():
    first = topic(*(lead(100 if p % 2 == 0 else 101) for p in range(PARTITIONS)))
    fleet = Fleet(first)
    relay = FleetRelay(fleet, broker_id=BROKER_ID, defaults=LogConfig(), default_partitions=1,
                       default_replication_factor=3)
    relay.refresh()
    server = ControlServer(relay, cluster_id="c", broker_id=BROKER_ID)
    ours, theirs = socket.socketpair()
    sent: list = []
    tap = MessageReader()
    original = server.broadcast

    def broadcast(message):  # what went on the wire, as the worker reads it
        tap.feed(encode(message))
        sent.extend(tap.messages())
        original(message)
    server.broadcast = broadcast
    server.attach(0, theirs)
    worker = Worker(ours)
    yield fleet, relay, worker, sent, first
    ours.close()
    theirs.close()


def test_a_few_partitions_changed_go_alone_and_the_worker_holds_what_was_told(setup):
    fleet, relay, worker, sent, first = setup
    states = list(first.leadership)
    states[3] = lead(201, 201, 301, epoch=1)  # a new leader
    states[6] = lead(100, 100, 200)  # an ISR shrink
    fleet.show(topic(*states))
    relay.refresh()
    worker.take()
    (message,) = sent
    assert isinstance(message, PartitionsChanged)
    assert message.indexes == (3, 6) and message.leadership == (states[3], states[6])
    assert message.owners == (1, 0)  # nodes 201 and 200: this appliance's workers 1 and 0
    assert worker.client.topic("big") == relay.topic("big")
    assert worker.heard[-1] == ("big", relay.topic("big"), (3, 6))


def test_most_partitions_changed_or_new_configs_go_whole(setup):
    fleet, relay, worker, sent, first = setup
    moved = topic(*(lead(200, 200, 300, epoch=1) if p % 2 == 0 else lead(201, epoch=1)
                    for p in range(PARTITIONS)))
    fleet.show(moved)
    relay.refresh()
    fleet.show(topic(*moved.leadership, configs={"retention.ms": "1000"}))
    relay.refresh()
    worker.take()
    assert [type(m) for m in sent] == [TopicChanged, TopicChanged]
    assert worker.client.topic("big") == relay.topic("big")
    assert [changed for _, _, changed in worker.heard[-2:]] == [None, None]


def test_a_new_topic_goes_whole_then_its_changes_alone(setup):
    fleet, relay, worker, sent, first = setup
    small = topic(lead(100), lead(101), name="small")
    fleet.show(first, small)
    relay.refresh()
    fleet.show(first, topic(lead(100), lead(201, 201, 301, epoch=1), name="small"))
    relay.refresh()
    worker.take()
    assert [type(m) for m in sent] == [TopicChanged, PartitionsChanged]
    assert worker.client.topic("small") == relay.topic("small")


def test_a_delta_that_does_not_fit_what_the_worker_holds_is_a_channel_error():
    """The supervisor's view and the worker's differ: the worker must not guess."""
    ours, theirs = socket.socketpair()
    client = ControlPlaneClient(ours, defaults=LogConfig(), default_partitions=1)
    ours.setblocking(False)
    info = TopicInfo("t", owners=(0, 1), leadership=(lead(200), lead(201)))
    theirs.sendall(encode(TopicChanged(info)))
    client.pump()
    for wrong in (PartitionsChanged("u", (0,), (0,), (lead(200),)),
                  PartitionsChanged("t", (2,), (0,), (lead(200),))):
        theirs.sendall(encode(wrong))
        with pytest.raises(ControlChannelError):
            client.pump()
    assert client.topic("t") == info
    ours.close()
    theirs.close()
