"""The appliance's side of the fleet (appliance/control/fleet.py), without a ZooKeeper:
`FleetRelay` turns the fleet's `FleetView` into the appliance's `TopicInfo`s and tells its
listeners what changed, driven here by a fleet whose views the test writes out."""

from appliance.control.fleet import (
    ISR_GROWTH_COALESCE_S,
    FleetRelay,
    FleetTopic,
    FleetView,
    isr_only_grew,
    local_owners,
)
from appliance.control.topics import (
    FleetNode,
    PartitionLeadership,
    TopicInfo,
    TopicResult,
)
from appliance.segments.config import LogConfig

BROKER_ID = 2  # this appliance: nodes 200 and 201


class ScriptedFleet:
    """The cluster membership as FleetRelay uses it: `view()` answers `current`, which the
    test replaces; a created topic is what the test says it becomes."""

    def __init__(self, view: FleetView):
        self.current = view
        self.created: list[tuple] = []
        self.after_create: FleetView | None = None

    def view(self) -> FleetView:
        return self.current

    def create_topic(self, name, partitions, replication_factor, configs, *, validate_only):
        self.created.append((name, partitions, replication_factor, configs, validate_only))
        if self.after_create is not None:
            self.current = self.after_create
        return TopicResult(name)


def node(node_id: int) -> FleetNode:
    return FleetNode(node_id, "127.0.0.1", 9000 + node_id)


def lead(leader: int, *replicas: int, epoch: int = 0) -> PartitionLeadership:
    return PartitionLeadership(leader, epoch, replicas, replicas)


NODES = {n: node(n) for n in (100, 101, 200, 201, 300, 301)}
ORDERS = FleetTopic("orders", (lead(100, 100, 201, 300), lead(201, 201, 300, 101),
                               lead(300, 300, 101, 200)), {"retention.ms": "1000"})
CLICKS = FleetTopic("clicks", (lead(101, 101, 301),))


def view(*topics: FleetTopic, nodes=None, controller_id: int = 1,
         node_configs=None) -> FleetView:
    return FleetView(NODES if nodes is None else nodes, {t.name: t for t in topics},
                     controller_id, node_configs or {})


class Heard:
    """A listener keeping what it was told."""

    def __init__(self):
        self.calls: list[tuple] = []

    def __call__(self, *args) -> None:
        self.calls.append(args)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def following(first: FleetView, clock=None) -> tuple[FleetRelay, ScriptedFleet, Heard, Heard]:
    """FleetRelay on `first`, refreshed once, its listeners' record emptied after."""
    fleet = ScriptedFleet(first)
    decisions = FleetRelay(fleet, broker_id=BROKER_ID, defaults=LogConfig(),
                           default_partitions=3, default_replication_factor=2,
                           **({} if clock is None else {"clock": clock}))
    topics, nodes = Heard(), Heard()
    decisions.add_listener(topics)
    decisions.add_fleet_listener(nodes)
    decisions.refresh()
    topics.calls.clear()
    nodes.calls.clear()
    return decisions, fleet, topics, nodes


def test_a_topic_appearing_is_told_in_the_appliances_terms():
    decisions, fleet, topics, _ = following(view(CLICKS))
    fleet.current = view(CLICKS, ORDERS, FleetTopic("__consumer_offsets", (lead(200, 200),)))
    decisions.refresh()
    orders = TopicInfo("orders", owners=(1, 1, 0), configs={"retention.ms": "1000"},
                       internal=False, leadership=ORDERS.leadership)
    offsets = TopicInfo("__consumer_offsets", owners=(0,), internal=True,
                        leadership=(lead(200, 200),))
    assert topics.calls == [("orders", orders), ("__consumer_offsets", offsets)]
    assert decisions.topic("orders") == orders
    assert {t.name for t in decisions.topics()} == {"clicks", "orders", "__consumer_offsets"}


def test_a_leadership_change_is_told_for_that_topic_only():
    decisions, fleet, topics, nodes = following(view(CLICKS, ORDERS))
    moved = FleetTopic("orders", (lead(201, 100, 201, 300, epoch=1), *ORDERS.leadership[1:]),
                       ORDERS.configs)
    fleet.current = view(CLICKS, moved)
    decisions.refresh()
    assert [(name, info.leadership) for name, info in topics.calls] == [
        ("orders", moved.leadership)]
    assert decisions.topic("orders").leadership[0].leader == 201
    assert nodes.calls == []


def test_a_topic_disappearing_is_told_as_none():
    decisions, fleet, topics, _ = following(view(CLICKS, ORDERS))
    fleet.current = view(ORDERS)
    decisions.refresh()
    assert topics.calls == [("clicks", None)]
    assert decisions.topic("clicks") is None
    assert [t.name for t in decisions.topics()] == ["orders"]


def test_the_first_view_tells_the_fleet_listeners_the_nodes_and_the_controllers_node():
    fleet = ScriptedFleet(view(controller_id=3))
    decisions = FleetRelay(fleet, broker_id=BROKER_ID, defaults=LogConfig(),
                           default_partitions=3, default_replication_factor=2)
    nodes = Heard()
    decisions.add_fleet_listener(nodes)
    nodes.calls.clear()  # what a listener hears when added is not this test's subject
    decisions.refresh()
    expected = dict(NODES)  # as registered: the configured broker.rack (here none)
    assert nodes.calls == [(expected, 300)]
    assert decisions.nodes == expected and decisions.controller_node_id == 300


def test_nodes_controller_and_node_configs_changes_each_call_the_fleet_listeners_once():
    decisions, fleet, topics, nodes = following(view(ORDERS))
    fewer = {n: v for n, v in NODES.items() if n // 100 != 3}
    fleet.current = view(ORDERS, nodes=fewer)
    decisions.refresh()
    assert [sorted(found) for found, _ in nodes.calls] == [[100, 101, 200, 201]]
    fleet.current = view(ORDERS, nodes=fewer, controller_id=-1)  # none elected
    decisions.refresh()
    assert [controller for _, controller in nodes.calls] == [100, -1]
    throttled = {200: {"leader.replication.throttled.rate": "1000000"}}
    fleet.current = view(ORDERS, nodes=fewer, controller_id=-1, node_configs=throttled)
    decisions.refresh()
    assert len(nodes.calls) == 3 and decisions.node_configs == throttled
    assert topics.calls == []


def test_nothing_changed_calls_no_listener():
    decisions, fleet, topics, nodes = following(view(CLICKS, ORDERS))
    fleet.current = view(CLICKS, ORDERS)  # equal, not the same objects
    decisions.refresh()
    decisions.refresh()
    assert topics.calls == [] and nodes.calls == []


def test_a_listener_that_raises_does_not_stop_the_others_hearing():
    fleet = ScriptedFleet(view(CLICKS, ORDERS))
    decisions = FleetRelay(fleet, broker_id=BROKER_ID, defaults=LogConfig(),
                           default_partitions=3, default_replication_factor=2)

    def broken(name, info):
        raise RuntimeError("a listener's bug")

    after = Heard()
    decisions.add_listener(broken)
    decisions.add_listener(after)
    decisions.refresh()
    assert [name for name, _ in after.calls] == ["clicks", "orders"]
    fleet.current = view(ORDERS)
    decisions.refresh()
    assert after.calls[-1] == ("clicks", None)


def test_a_fleet_listener_that_raises_does_not_stop_the_others_hearing():
    fleet = ScriptedFleet(view(ORDERS))
    decisions = FleetRelay(fleet, broker_id=BROKER_ID, defaults=LogConfig(),
                           default_partitions=3, default_replication_factor=2)
    decisions.refresh()
    failing = []

    def broken(nodes, controller):
        failing.append(controller)
        if len(failing) > 1:  # its first call, when added, goes through
            raise RuntimeError("a listener's bug")

    after = Heard()
    decisions.add_fleet_listener(broken)
    decisions.add_fleet_listener(after)
    fleet.current = view(ORDERS, controller_id=2)
    decisions.refresh()
    assert after.calls[-1][1] == 200 and failing[-1] == 200


def test_a_created_topic_is_seen_before_the_reply():
    decisions, fleet, topics, _ = following(view(CLICKS))
    fleet.after_create = view(CLICKS, ORDERS)
    assert decisions.create_topic("orders", configs={"retention.ms": "1000"}) == \
        TopicResult("orders")
    assert fleet.created == [("orders", 3, 2, {"retention.ms": "1000"}, False)]  # defaults
    assert decisions.topic("orders") is not None
    assert [name for name, _ in topics.calls] == ["orders"]


def test_local_owners_are_this_appliances_worker_per_partition_or_minus_one():
    leadership = (lead(200, 200, 100), lead(100, 100, 201), lead(300, 300, 100),
                  lead(-1, 101, 200))  # the last offline: still a replica here
    assert local_owners(leadership, BROKER_ID) == (0, 1, -1, 0)
    assert local_owners(leadership, 3) == (-1, -1, 0, -1)
    assert local_owners((), BROKER_ID) == ()


# ISR growth, told together (the module docstring of appliance/control/fleet.py) ------------

def with_isr(topic: FleetTopic, index: int, isr: tuple[int, ...], **changes) -> FleetTopic:
    """`topic` with partition `index`'s ISR (and any other field in `changes`) replaced."""
    states = list(topic.leadership)
    old = states[index]
    states[index] = type(old)(changes.get("leader", old.leader),
                              changes.get("leader_epoch", old.leader_epoch), old.replicas, isr)
    return FleetTopic(topic.name, tuple(states), topic.configs)


SHRUNK = FleetTopic("orders", tuple(type(s)(s.leader, s.leader_epoch, s.replicas, s.replicas[:1])
                                    for s in ORDERS.leadership), ORDERS.configs)


def test_isr_growths_within_the_window_are_told_once_at_its_end_with_the_latest_state():
    clock = Clock()
    decisions, fleet, topics, _ = following(view(SHRUNK, CLICKS), clock)
    clock.now += 0.01  # within the window after the first view was told
    one = with_isr(SHRUNK, 0, ORDERS.leadership[0].isr)
    fleet.current = view(one, CLICKS)
    decisions.refresh()
    assert topics.calls == []
    assert decisions.next_due() == 1000.0 + ISR_GROWTH_COALESCE_S
    assert decisions.topic("orders").leadership[0].isr == (100,)  # what the workers know
    clock.now += 0.05
    two = with_isr(one, 1, ORDERS.leadership[1].isr)
    fleet.current = view(two, CLICKS)
    decisions.refresh()
    decisions.refresh()  # the same view again: still held back
    assert topics.calls == []
    clock.now = decisions.next_due()
    decisions.refresh()  # the same view as the last refresh, but the held-back change is due
    assert [(name, info.leadership) for name, info in topics.calls] == [
        ("orders", two.leadership)]
    assert decisions.next_due() is None
    decisions.refresh()
    assert len(topics.calls) == 1


def test_an_isr_growth_after_a_quiet_window_is_told_at_once():
    clock = Clock()
    decisions, fleet, topics, _ = following(view(SHRUNK), clock)
    clock.now += ISR_GROWTH_COALESCE_S
    grown = with_isr(SHRUNK, 2, ORDERS.leadership[2].isr)
    fleet.current = view(grown)
    decisions.refresh()
    assert [info.leadership for _, info in topics.calls] == [grown.leadership]
    assert decisions.next_due() is None


def test_a_shrinking_isr_or_a_new_leader_is_told_at_once_with_what_was_held_back():
    clock = Clock()
    decisions, fleet, topics, _ = following(view(SHRUNK), clock)
    grown = with_isr(SHRUNK, 0, ORDERS.leadership[0].isr)
    fleet.current = view(grown)
    decisions.refresh()
    assert topics.calls == []  # held back
    clock.now += 0.01
    shrunk = with_isr(grown, 1, ())  # the controller dropped a replica: told now
    fleet.current = view(shrunk)
    decisions.refresh()
    assert [info.leadership for _, info in topics.calls] == [shrunk.leadership]
    clock.now += 0.01
    moved = with_isr(shrunk, 2, (300,), leader=300, leader_epoch=1)
    fleet.current = view(moved)
    decisions.refresh()
    assert [info.leadership for _, info in topics.calls][-1] == moved.leadership
    assert decisions.next_due() is None


def test_isr_only_grew_means_nothing_else_changed():
    told = TopicInfo("orders", owners=(1, 1, 0), leadership=SHRUNK.leadership)
    grown = with_isr(SHRUNK, 0, (100, 201))
    assert isr_only_grew(told, TopicInfo("orders", owners=(1, 1, 0),
                                         leadership=grown.leadership))
    assert not isr_only_grew(told, TopicInfo("orders", owners=(1, 1, 0),
                                             leadership=with_isr(SHRUNK, 0, ()).leadership))
    assert not isr_only_grew(told, TopicInfo("orders", owners=(1, 1, 0), leadership=with_isr(
        SHRUNK, 0, (100, 201), leader_epoch=1).leadership))
    assert not isr_only_grew(told, TopicInfo("orders", owners=(1, 0, 0),
                                             leadership=grown.leadership))
    assert not isr_only_grew(told, TopicInfo("orders", owners=(1, 1, 0), configs={"a": "b"},
                                             leadership=grown.leadership))
