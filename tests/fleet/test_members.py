"""The fleet's coordination against a real three-server ZooKeeper ensemble: registration,
controller election and fencing, topic creation from any member, leader election when nodes
go, session expiry, and ZooKeeper losing servers. Members are the real `ClusterMember`s the
supervisor runs; their nodes are registered as a serving worker registers them."""

import itertools
import time

import pytest
from kazoo.client import KazooClient

from cluster import znodes
from cluster.controller import Fenced, FencedWriter, elect, write_states
from cluster.member import ClusterMember
from cluster.placement import appliance_of
from cluster.session import BadVersionError, Session
from klog.protocol.error_codes import ErrorCode
from tests.polling import wait_until

SESSION_MS = 4000
_chroots = itertools.count()


@pytest.fixture
def fleet(ensemble):
    """Three appliances (broker ids 1-3) with two nodes each, in a chroot of their own."""
    connect = f"{ensemble.connect}/klog-test-{next(_chroots)}"
    members = {}
    try:
        for broker_id in (1, 2, 3):
            member = ClusterMember(connect, broker_id=broker_id, host="127.0.0.1",
                                   rack=f"rack-{broker_id % 2}", session_timeout_ms=SESSION_MS,
                                   connection_timeout_ms=10_000)
            member.start()
            for worker in (0, 1):
                member.register_node(broker_id * 100 + worker, 9000 + broker_id * 10 + worker)
            members[broker_id] = member
        assert members[1].wait_for(lambda s: len(s.brokers) == 6 and s.controller > 0, 20)
        yield members
    finally:
        for member in members.values():
            member.stop()


def controller_of(members) -> ClusterMember:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        elected = [m for m in members.values() if m.is_controller]
        if len(elected) == 1:
            return elected[0]
        time.sleep(0.1)
    raise AssertionError(f"not one controller: {[m.broker_id for m in elected]}")


def expire(member: ClusterMember, ensemble) -> None:
    """Expire a member's session from ZooKeeper's side, as reference/cluster.md shows."""
    twin = KazooClient(hosts=ensemble.connect, client_id=member.session.client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def all_states(member, name, partitions):
    return member.wait_for(lambda s: name in s.topics and
                           len(s.topics[name].states) == partitions, 20)


def test_one_controller_and_a_topic_created_through_any_member(fleet):
    controller = controller_of(fleet)
    snapshot = controller.snapshot()
    assert snapshot.controller == controller.broker_id and snapshot.controller_epoch >= 1
    assert set(snapshot.appliances) == {1, 2, 3}
    other = next(m for m in fleet.values() if m is not controller)
    assert other.create_topic("clicks", 12, 2, {"retention.ms": "3600000"}).error == 0
    assert all_states(other, "clicks", 12)
    topic = other.snapshot().topics["clicks"]
    assert topic.config == {"retention.ms": "3600000"}
    leaders = set()
    for partition, replicas in topic.replicas.items():
        assert len({appliance_of(r) for r in replicas}) == 2
        state, _ = topic.states[partition]
        assert state.leader == replicas[0] and set(state.isr) == set(replicas)
        assert state.leader_epoch == 0 and state.controller_epoch == snapshot.controller_epoch
        leaders.add(appliance_of(state.leader))
    assert leaders == {1, 2, 3}
    assert other.create_topic("clicks", 1, 1, {}).error == ErrorCode.TOPIC_ALREADY_EXISTS
    too_many = other.create_topic("wide", 1, 4, {})
    assert too_many.error == ErrorCode.INVALID_REPLICATION_FACTOR and "4" in too_many.message


def test_a_dead_node_loses_leadership_to_the_isr_only(fleet):
    member = fleet[2]
    assert member.create_topic("events", 6, 2, {}).error == 0
    assert all_states(member, "events", 6)
    before = member.snapshot().topics["events"]
    fleet[1].unregister_node(100)
    fleet[1].unregister_node(101)

    def settled(s):
        topic = s.topics["events"]
        return all(state.leader not in (100, 101) and not {100, 101} & set(state.isr)
                   for state, _ in topic.states.values())
    assert member.wait_for(settled, 20)
    after = member.snapshot().topics["events"]
    for partition, replicas in after.replicas.items():
        old, _ = before.states[partition]
        new, _ = after.states[partition]
        if appliance_of(old.leader) == 1:
            assert new.leader == next(r for r in replicas if appliance_of(r) != 1)
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert new.leader == old.leader and new.leader_epoch == old.leader_epoch
    # single-replica partitions of a dead node go offline, never to an out-of-sync node
    assert member.create_topic("single", 6, 1, {}).error == 0
    assert all_states(member, "single", 6)
    fleet[3].unregister_node(300)
    fleet[3].unregister_node(301)
    assert member.wait_for(lambda s: all(
        st.leader == -1 for p, (st, _) in s.topics["single"].states.items()
        if appliance_of(s.topics["single"].replicas[p][0]) == 3), 20)


def test_controller_failover_fences_the_old_controller(fleet, ensemble):
    old = controller_of(fleet)
    old_epoch = old.snapshot().controller_epoch
    election = old.election
    expire(old, ensemble)
    survivors = {k: m for k, m in fleet.items() if m is not old}
    deadline = time.monotonic() + SESSION_MS / 1000 + 15
    while time.monotonic() < deadline:
        new = [m for m in survivors.values() if m.is_controller]
        if new and new[0].snapshot().controller_epoch > old_epoch:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("no new controller after the old one's session expired")
    # the deposed controller's epoch no longer lets it write, even with a live session
    assert old.wait_for(lambda s: s.controller_epoch > old_epoch, 20)
    with pytest.raises(Fenced):
        FencedWriter(old.session, election).write(
            lambda tx: tx.create("/fenced-write", b"x"))
    assert old.session.call("exists", "/fenced-write") is None
    # a topic created afterwards works
    assert survivors[next(iter(survivors))].create_topic("after", 3, 2, {}).error == 0
    assert all_states(old, "after", 3)


def test_an_expired_member_registers_again_on_its_new_session(fleet, ensemble):
    member = fleet[3]
    watcher = fleet[1]
    before = member.session.session_id
    path = znodes.broker_path(300)
    _, registered = member.session.call("get", path)
    assert registered.ephemeralOwner == before
    expire(member, ensemble)
    # its ephemeral went with the old session and was made again on the new one (a znode
    # made later has a later czxid). A watcher need not see the moment between: the member
    # registers again within milliseconds, and a watch fires once, then reads what is there
    # by then, so waiting for one to see the broker gone failed when it came back first.
    looker = KazooClient(hosts=ensemble.connect + member.session.client.chroot)
    looker.start(timeout=10)
    try:
        stat = wait_until(lambda: (made := looker.exists(path)) is not None
                          and made.czxid > registered.czxid and made, 30,
                          f"{path} made again", interval_s=0.05)
    finally:
        looker.stop()
        looker.close()
    assert stat.ephemeralOwner not in (0, before)
    assert watcher.wait_for(lambda s: {300, 301} <= set(s.brokers) and 3 in s.appliances, 30)
    assert member.session.session_id != before
    data, stat = member.session.call("get", znodes.broker_path(300))
    assert stat.ephemeralOwner == member.session.session_id


def test_quorum_loss_stops_only_what_needs_zookeeper(fleet, ensemble):
    member = fleet[1]
    ensemble.stop(2)  # one of three: nothing changes
    assert member.create_topic("one-down", 2, 2, {}).error == 0
    ensemble.stop(1)  # two of three: no quorum
    try:
        failed = member.create_topic("no-quorum", 2, 2, {})
        assert failed.error == ErrorCode.REQUEST_TIMED_OUT
        assert "ZooKeeper" in failed.message
    finally:
        ensemble.start(1)
        ensemble.start(2)
    deadline = time.monotonic() + 60
    while True:
        result = member.create_topic("quorum-back", 2, 2, {})
        if result.error == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert result.error == 0, result
    assert all_states(member, "quorum-back", 2)


def test_pipelined_state_writes_stand_alone_and_a_deposed_controller_writes_none(ensemble):
    session = Session(f"{ensemble.connect}/klog-test-{next(_chroots)}",
                      session_timeout_ms=SESSION_MS, connection_timeout_ms=10_000)
    session.start()
    try:
        paths = [znodes.state_path("t", p) for p in (0, 1)]
        for path in paths:
            session.call("create", path, znodes.PartitionState(100, 0, (100, 200), 1).encode(),
                         makepath=True)
        writer = FencedWriter(session, elect(session, 1))
        moved = znodes.PartitionState(200, 1, (200,), writer.election.epoch)
        errors = write_states(writer, [(paths[0], moved, 0), (paths[1], moved, 7)])
        assert errors[0] is None and isinstance(errors[1], BadVersionError)
        states = [znodes.PartitionState.decode(session.call("get", p)[0], p) for p in paths]
        assert states[0] == moved and states[1].leader == 100  # each multi stood alone
        session.call("set", znodes.CONTROLLER_EPOCH, b"99")  # another controller's election
        with pytest.raises(Fenced):
            write_states(writer, [(paths[1], moved, 0)])
        assert znodes.PartitionState.decode(session.call("get", paths[1])[0],
                                            paths[1]).leader == 100
    finally:
        session.stop()
