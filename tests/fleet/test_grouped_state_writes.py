"""The controller's writes of many partitions (issue 26), against a real three-server
ensemble: partition states grouped into fenced multis (`FencedWriter.write_grouped`): every
state of several groups lands; one state changed meanwhile by somebody else fails alone
while the rest of its group still lands; a deposed controller writes nothing at all. And a
topic of many partitions is deleted whole, its znodes found in pipelined reads; the states
a pass wrote are known to the controller's appliance without reading them back. A
reassignment's ends, and its request's taking up, in multis below jute.maxbuffer too."""

import dataclasses

import pytest

from cluster import controller, reassignment, state_changes, znodes
from cluster.controller import (
    Fenced,
    FencedWriter,
    elect,
    reconcile,
    with_states,
    write_states,
)
from cluster.fleet_view import read_fleet

PARTITIONS = controller.GROUP * 2 + 50  # three groups, the last one short


def make_states(session, name: str) -> list[tuple[str, int]]:
    """The topic's state znodes, leader 100 in epoch 0; (path, version) of each."""
    first = znodes.PartitionState(100, 0, (100, 200, 300), 1).encode()
    for p in range(PARTITIONS):
        session.call("create", znodes.state_path(name, p), first, makepath=True)
    return [(znodes.state_path(name, p), 0) for p in range(PARTITIONS)]


def leaders(session, name: str) -> list[int]:
    paths = [znodes.state_path(name, p) for p in range(PARTITIONS)]
    return [znodes.PartitionState.decode(data, path).leader
            for path, (data, _) in zip(paths, session.get_many(paths))]


def transactions(session, name: str) -> int:
    """How many ZooKeeper transactions wrote the topic's states (a multi's ops share one
    zxid)."""
    paths = [znodes.state_path(name, p) for p in range(PARTITIONS)]
    return len({stat.mzxid for _, stat in session.get_many(paths)})


def moved(paths, epoch: int) -> list:
    return [(path, znodes.PartitionState(200, 1, (200, 300), epoch), version)
            for path, version in paths]


def test_every_state_of_every_group_lands(session):
    paths = make_states(session, "big")
    election = elect(session, 1)
    errors = write_states(FencedWriter(session, election), moved(paths, election.epoch))
    assert errors == [None] * PARTITIONS
    assert leaders(session, "big") == [200] * PARTITIONS
    assert transactions(session, "big") == 3  # one multi per group, not one per state


def test_a_state_changed_meanwhile_fails_alone(session):
    paths = make_states(session, "raced")
    stale = controller.GROUP + 7  # in the second group
    session.call("set", paths[stale][0],
                 znodes.PartitionState(100, 0, (100, 200), 1).encode())  # an ISR shrink
    election = elect(session, 1)
    errors = write_states(FencedWriter(session, election), moved(paths, election.epoch))
    assert [i for i, e in enumerate(errors) if e is not None] == [stale]
    assert type(errors[stale]).__name__ == "BadVersionError"
    assert leaders(session, "raced") == [100 if p == stale else 200 for p in range(PARTITIONS)]
    # the first and last groups whole, the second's other states one multi each, the stale
    # one by its own earlier set
    assert transactions(session, "raced") == 1 + (controller.GROUP - 1) + 1 + 1


def test_a_deposed_controller_writes_nothing(session):
    paths = make_states(session, "deposed")
    old = elect(session, 1)
    session.call("delete", znodes.CONTROLLER)  # its session "expired": another one won
    assert elect(session, 2) is not None
    with pytest.raises(Fenced):
        write_states(FencedWriter(session, old), moved(paths, old.epoch))
    assert leaders(session, "deposed") == [100] * PARTITIONS


def test_a_topic_being_deleted_leaves_no_znode(session):
    replicas = {p: (100, 200, 300) for p in range(PARTITIONS)}
    session.call("create", znodes.topic_path("gone"), znodes.TopicAssignment(replicas).encode(),
                 makepath=True)
    make_states(session, "gone")
    session.call("create", znodes.delete_request_path("gone"), b"", makepath=True)
    election = elect(session, 1)
    snapshot = read_fleet(session, None)
    assert snapshot.deleting == {"gone"}
    assert reconcile(FencedWriter(session, election), snapshot) == 1
    paths = [znodes.state_path("gone", p) for p in range(PARTITIONS)] + [
        znodes.partition_path("gone", p) for p in range(PARTITIONS)] + [
        znodes.partitions_path("gone"), znodes.topic_path("gone"),
        znodes.delete_request_path("gone")]
    assert session.get_many(paths) == [None] * len(paths)


def test_the_states_written_are_known_before_they_are_read_back(session):
    """After an appliance's death the controller settles every partition; the snapshot it
    then publishes at once (`with_states`) is what reading ZooKeeper back gives: new
    partitions' first states, leaders elected and ISRs shrunk, with their versions."""
    replicas = {p: tuple(((p + i) % 3 + 1) * 100 for i in range(3)) for p in range(PARTITIONS)}
    session.call("create", znodes.topic_path("known"), znodes.TopicAssignment(
        replicas).encode(), makepath=True)
    session.call("create", znodes.topic_path("fresh"), znodes.TopicAssignment(
        {0: (200, 300), 1: (300, 200)}).encode(), makepath=True)
    for p, r in replicas.items():
        session.call("create", znodes.state_path("known", p),
                     znodes.PartitionState(r[0], 0, r, 1).encode(), makepath=True)
    election = elect(session, 2)
    read = read_fleet(session, None)
    survivors = {node: znodes.BrokerRegistration(node, "127.0.0.1", 9000, None)
                 for node in (200, 300)}  # appliance 1 (node 100) is gone
    snapshot = dataclasses.replace(read, brokers=survivors)
    written: list = []
    assert reconcile(FencedWriter(session, election), snapshot, written=written) == \
        PARTITIONS + 1
    assert len(written) == PARTITIONS + 2
    known = with_states(snapshot, written)
    after = dataclasses.replace(read_fleet(session, None), brokers=survivors)
    assert known.topics == after.topics
    assert {s.leader for s, _ in known.topics["known"].states.values()} == {200, 300}


def test_a_topic_beyond_one_multi_gets_every_first_state_and_is_deleted_whole(session):
    """A topic of 6,000 partitions: its first states (with their parent znodes) in one multi
    would pass ZooKeeper's jute.maxbuffer (1 MB), and the server would drop the controller's
    connection at every try, leaving the topic without a leader for good. In multis of GROUP
    partitions, each with its note, every state lands; deleting it is grouped the same way."""
    count = 6000
    session.call("create", znodes.topic_path("huge"), znodes.TopicAssignment(
        {p: (100, 200, 300) for p in range(count)}).encode(), makepath=True)
    election = elect(session, 1)
    live = {node: znodes.BrokerRegistration(node, "127.0.0.1", 9000, None)
            for node in (100, 200, 300)}
    snapshot = dataclasses.replace(read_fleet(session, None), brokers=live)
    written: list = []
    chunks = -(-count // controller.GROUP)
    assert reconcile(FencedWriter(session, election), snapshot, written=written) == chunks
    assert len(written) == count
    paths = [znodes.state_path("huge", p) for p in range(count)]
    states = [znodes.PartitionState.decode(data, path)
              for path, (data, _) in zip(paths, session.get_many(paths))]
    assert {(s.leader, s.isr) for s in states} == {(100, (100, 200, 300))}
    noted = session.call("get_children", state_changes.ROOT)
    assert len(noted) == chunks  # each multi told the other appliances its states

    session.call("create", znodes.delete_request_path("huge"), b"", makepath=True)
    snapshot = read_fleet(session, None)
    assert snapshot.deleting == {"huge"}
    assert reconcile(FencedWriter(session, election), snapshot) == 1
    gone = paths + [znodes.partition_path("huge", p) for p in range(count)] + [
        znodes.partitions_path("huge"), znodes.topic_path("huge"),
        znodes.delete_request_path("huge")]
    assert session.get_many(gone) == [None] * len(gone)


def test_moves_ending_together_end_a_multi_at_a_time(session):
    """The ends of a reassignment's moves (new states, the assignment without the moves) go
    in one multi per topic, which must stay below jute.maxbuffer: at most `per_multi` end in
    one pass, the next passes end the rest, and every state and the assignment come out as
    if they had ended together."""
    count, per_multi = 20, 8
    session.call("create", znodes.topic_path("moving"), znodes.TopicAssignment(
        {p: (100, 200, 300, 400) for p in range(count)},
        {p: (400,) for p in range(count)}, {p: (300,) for p in range(count)}).encode(),
        makepath=True)
    for p in range(count):  # every target replica in sync: each move can end
        session.call("create", znodes.state_path("moving", p), znodes.PartitionState(
            300, 0, (300, 100, 200, 400), 1).encode(), makepath=True)
    election = elect(session, 1)
    live = {node: znodes.BrokerRegistration(node, "127.0.0.1", 9000, None)
            for node in (100, 200, 300, 400)}
    ended = []
    for _ in range(5):
        snapshot = dataclasses.replace(read_fleet(session, None), brokers=live)
        moving = snapshot.topics["moving"]
        ended.append(count - len(moving.adding))
        if not moving.adding:
            break
        assert reassignment.advance(FencedWriter(session, election), snapshot,
                                    per_multi=per_multi) == 1
    assert ended == [0, 8, 16, 20]
    final = read_fleet(session, None).topics["moving"]
    assert final.replicas == {p: (100, 200, 400) for p in range(count)}
    assert not final.removing
    states = {s for s, _ in final.states.values()}
    assert states == {znodes.PartitionState(100, 1, (100, 200, 400), election.epoch)}


def moving_request(session, topics: dict[str, int]) -> None:
    """Topics of `count` partitions on (100, 200, 300), and a request moving each one's
    partitions 0 and 1 from 300 to 400."""
    for name, count in topics.items():
        session.call("create", znodes.topic_path(name), znodes.TopicAssignment(
            {p: (100, 200, 300) for p in range(count)}).encode(), makepath=True)
        for p in range(count):
            session.call("create", znodes.state_path(name, p), znodes.PartitionState(
                100, 0, (100, 200, 300), 1).encode(), makepath=True)
    session.call("create", znodes.REASSIGN_PARTITIONS, znodes.ReassignmentRequest(
        tuple((name, p, (100, 200, 400)) for name in topics for p in (0, 1))).encode(),
        makepath=True)


FOUR = {node: znodes.BrokerRegistration(node, "127.0.0.1", 9000, None)
        for node in (100, 200, 300, 400)}


def accepted(session, names) -> dict:
    topics = read_fleet(session, None).topics
    return {name: (topics[name].replicas[0], topics[name].adding, topics[name].removing)
            for name in names}


def test_a_request_beyond_one_multi_is_taken_up_a_topic_at_a_time(session):
    """A topic's assignment lists all its partitions, so a request naming two big topics
    would pass jute.maxbuffer in one multi. Beyond `accept_bytes`, each topic's assignment
    goes in its own multi behind a check of the request, and the last one deletes it; the
    assignments come out as if written together."""
    names = {"wide-a": 30, "wide-b": 30}
    moving_request(session, names)
    election = elect(session, 1)
    snapshot = dataclasses.replace(read_fleet(session, None), brokers=FOUR)
    assert reassignment.advance(FencedWriter(session, election), snapshot,
                                per_multi=controller.GROUP, accept_bytes=1) == 2
    assert session.call("exists", znodes.REASSIGN_PARTITIONS) is None
    moving = {p: (400,) for p in (0, 1)}, {p: (300,) for p in (0, 1)}
    assert accepted(session, names) == {name: ((100, 200, 400, 300), *moving)
                                        for name in names}
    zxids = {session.call("exists", znodes.topic_path(name)).mzxid for name in names}
    assert len(zxids) == 2  # two multis


def test_a_request_taken_up_midway_is_finished_by_the_next_pass(session):
    """A topic changed after the pass read it: the multis before it land, the request stays,
    and the next pass takes it up again from what it reads: the topic already moving is
    moved to the same target again (nothing changes), the other one now, and the request
    goes."""
    names = {"half-a": 10, "half-b": 10}
    moving_request(session, names)
    election = elect(session, 1)
    stale = dataclasses.replace(read_fleet(session, None), brokers=FOUR)
    session.call("set", znodes.topic_path("half-b"), znodes.TopicAssignment(
        {p: (100, 200, 300) for p in range(10)}).encode())  # the same, one version on
    assert reassignment.advance(FencedWriter(session, election), stale,
                                per_multi=controller.GROUP, accept_bytes=1) == 1
    assert session.call("exists", znodes.REASSIGN_PARTITIONS) is not None
    first = accepted(session, names)
    assert first["half-a"][1] == {0: (400,), 1: (400,)} and not first["half-b"][1]
    fresh = dataclasses.replace(read_fleet(session, None), brokers=FOUR)
    assert reassignment.advance(FencedWriter(session, election), fresh,
                                per_multi=controller.GROUP, accept_bytes=1) == 2
    assert session.call("exists", znodes.REASSIGN_PARTITIONS) is None
    moving = {p: (400,) for p in (0, 1)}, {p: (300,) for p in (0, 1)}
    assert accepted(session, names) == {name: ((100, 200, 400, 300), *moving)
                                        for name in names}


def test_a_small_request_is_still_one_multi(session):
    names = {"small-a": 5, "small-b": 5}
    moving_request(session, names)
    election = elect(session, 1)
    snapshot = dataclasses.replace(read_fleet(session, None), brokers=FOUR)
    assert reassignment.advance(FencedWriter(session, election), snapshot,
                                per_multi=controller.GROUP) == 1
    zxids = {session.call("exists", znodes.topic_path(name)).mzxid for name in names}
    assert len(zxids) == 1
    assert session.call("exists", znodes.REASSIGN_PARTITIONS) is None


def test_a_request_naming_big_topics_passes_no_multi_limit(session):
    """The real limit: six topics of 10,000 partitions, a request moving one partition of
    each. Their assignments together are about 1.25 MB, past the ensemble's jute.maxbuffer
    (1 MB): in one multi the server dropped the controller's connection at every try, and
    the request was never taken up."""
    names = [f"big-{i}" for i in range(6)]
    for name in names:
        session.call("create", znodes.topic_path(name), znodes.TopicAssignment(
            {p: (100, 200, 300) for p in range(10_000)}).encode(), makepath=True)
    session.call("create", znodes.REASSIGN_PARTITIONS, znodes.ReassignmentRequest(
        tuple((name, 0, (100, 200, 400)) for name in names)).encode(), makepath=True)
    election = elect(session, 1)
    snapshot = dataclasses.replace(read_fleet(session, None), brokers=FOUR)
    assert reassignment.advance(FencedWriter(session, election), snapshot,
                                per_multi=controller.GROUP) == 3
    assert session.call("exists", znodes.REASSIGN_PARTITIONS) is None
    topics = read_fleet(session, None).topics
    assert {name: (topics[name].replicas[0], topics[name].adding) for name in names} == {
        name: ((100, 200, 400, 300), {0: (400,)}) for name in names}
