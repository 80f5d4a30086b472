"""A fleet's view is rebuilt per topic that changed (issue 26: a controller's failover sends
every appliance about 50 notes of 200 states, and rebuilding all 10,000 partitions' view and
`TopicInfo`s for each took 15 ms of a busy supervisor). From the member's snapshots, as a
note (`apply_changes`) or a fleet pass (a fresh read) makes them, through `ViewBuilder` and
`FleetRelay`: the topics that changed are told with their new states, the others are neither
rebuilt nor told."""

from __future__ import annotations

import dataclasses

from appliance.control.fleet import FleetRelay
from appliance.fleet_membership import ViewBuilder
from appliance.segments.config import LogConfig
from cluster import znodes
from cluster.fleet_view import FleetSnapshot, TopicState
from cluster.state_changes import Change, apply_changes

REPLICAS = (100, 200, 300)


def topic_state(name: str, leader: int = 100, isr=REPLICAS, version: int = 1) -> TopicState:
    replicas = {p: REPLICAS for p in range(4)}
    states = {p: (znodes.PartitionState(leader, 0, isr, 1), version) for p in replicas}
    return TopicState(name, replicas, 0, states, {}, {}, {}, created=1)


def fresh_read(snapshot: FleetSnapshot, **replaced: TopicState) -> FleetSnapshot:
    """What a fleet pass reads: new objects, equal to the old unless `replaced`."""
    topics = {name: dataclasses.replace(t, states=dict(t.states), replicas=dict(t.replicas))
              for name, t in snapshot.topics.items()}
    return dataclasses.replace(snapshot, topics={**topics, **replaced})


def note(topic: str, partition: int, leader: int, isr, version: int, zxid: int = 10):
    state = znodes.PartitionState(leader, 1, tuple(isr), 2)
    return Change(topic, partition, state, version, zxid, "", b"")


class Fleet:
    """The membership as FleetRelay uses it, its view built by the real ViewBuilder."""

    def __init__(self, snapshot: FleetSnapshot):
        self.snapshot = snapshot
        self.builder = ViewBuilder()
        self.builds = 0

    def view(self):
        self.builds += 1
        return self.builder.build(self.snapshot)


def relay_of(fleet: Fleet) -> tuple[FleetRelay, list]:
    relay = FleetRelay(fleet, broker_id=2, defaults=LogConfig(), default_partitions=1,
                       default_replication_factor=3)
    told: list = []
    relay.add_listener(lambda name, info: told.append((name, info)))
    return relay, told


def start() -> tuple[Fleet, FleetRelay, list]:
    fleet = Fleet(FleetSnapshot(topics={n: topic_state(n) for n in ("a", "b", "c")}))
    relay, told = relay_of(fleet)
    relay.refresh()
    assert sorted(name for name, _ in told) == ["a", "b", "c"]
    told.clear()
    return fleet, relay, told


def test_a_note_rebuilds_and_tells_only_the_topic_it_names():
    fleet, relay, told = start()
    before = relay.topics()
    fleet.snapshot = apply_changes(fleet.snapshot, [note("b", 2, 200, (200, 300), version=2)])
    relay.refresh()
    assert [name for name, _ in told] == ["b"]
    (_, info), = told
    assert info.leadership[2].leader == 200 and info.leadership[2].isr == (200, 300)
    assert info.leadership[2].leader_epoch == 1
    assert [p.leader for p in info.leadership] == [100, 100, 200, 100]
    assert info.owners == (0,) * 4  # node 200: this appliance's worker 0
    after = {i.name: i for i in relay.topics()}
    assert all(after[i.name] is i for i in before if i.name != "b")


def test_a_fresh_read_of_the_same_fleet_tells_nothing_and_keeps_every_object():
    fleet, relay, told = start()
    view = fleet.view()
    fleet.snapshot = fresh_read(fleet.snapshot)
    relay.refresh()
    assert told == []
    again = fleet.view()
    assert all(again.topics[n] is view.topics[n] for n in ("a", "b", "c"))


def test_a_fresh_read_that_differs_tells_that_topic_with_what_it_read():
    fleet, relay, told = start()
    fleet.snapshot = fresh_read(fleet.snapshot,
                                c=topic_state("c", leader=300, isr=(300,), version=5))
    relay.refresh()
    assert [name for name, _ in told] == ["c"]
    assert all(p.leader == 300 and p.isr == (300,) for p in told[0][1].leadership)


def test_a_topic_being_deleted_is_told_gone_and_one_created_is_told():
    fleet, relay, told = start()
    fleet.snapshot = dataclasses.replace(
        fleet.snapshot, deleting=frozenset({"a"}),
        topics={**fleet.snapshot.topics, "d": topic_state("d", leader=200)})
    relay.refresh()
    assert sorted((name, info is None) for name, info in told) == [("a", True), ("d", False)]
    assert sorted(i.name for i in relay.topics()) == ["b", "c", "d"]
