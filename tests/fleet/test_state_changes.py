"""The controller's notes of the states it writes (issue 26, `cluster/state_changes.py`),
against a real three-server ensemble: each multi of states carries one note, in the same
transaction, naming exactly what ZooKeeper then holds; an appliance whose fleet pass is stuck
in a long read still shows the new states from the notes; a note about an earlier topic of
the same name is not applied to a new one; a read older than what a note showed does not
take a state back; the controller keeps only the newest notes; a leader's ISR change
reaches the other appliances by its note."""

import dataclasses
import threading
import uuid

import pytest

from cluster import controller, state_changes, znodes
from cluster import isr as isr_changes
from cluster.controller import FencedWriter, elect, write_states
from cluster.fleet_view import FleetSnapshot, TopicState, read_fleet
from cluster.member import ClusterMember
from cluster.session import Session
from klog.protocol.error_codes import ErrorCode
from tests.polling import wait_until

PARTITIONS = controller.GROUP * 2 + 50  # three multis, the last one short


def make_topic(session, name: str, partitions: int = PARTITIONS) -> list:
    """A topic whose partitions are led by node 100 in epoch 0; (path, version) of each."""
    replicas = {p: (100, 200, 300) for p in range(partitions)}
    session.call("create", znodes.topic_path(name),
                 znodes.TopicAssignment(replicas).encode(), makepath=True)
    first = znodes.PartitionState(100, 0, (100, 200, 300), 1).encode()
    for p in range(partitions):
        session.call("create", znodes.state_path(name, p), first, makepath=True)
    return [(znodes.state_path(name, p), 0) for p in range(partitions)]


def moved(paths, epoch: int) -> list:
    return [(path, znodes.PartitionState(200, 1, (200, 300), epoch), version)
            for path, version in paths]


def notes(session) -> list:
    names = sorted(session.call("get_children", state_changes.ROOT))
    return [(name, *session.call("get", f"{state_changes.ROOT}/{name}")) for name in names]


def test_each_multi_of_states_carries_a_note_of_what_it_wrote(session):
    paths = make_topic(session, "noted")
    election = elect(session, 1)
    assert write_states(FencedWriter(session, election), moved(paths, election.epoch)) == \
        [None] * PARTITIONS
    written = notes(session)
    assert len(written) == 3  # one per multi
    changes = [change for name, data, stat in written
               for change in state_changes.decode(data, stat.czxid, name)]
    assert len(changes) == PARTITIONS
    stats = {path: got for path, got in zip(
        [p for p, _ in paths], session.get_many([p for p, _ in paths]))}
    for topic, partition, state, version, zxid, path, raw in changes:
        data, stat = stats[znodes.state_path(topic, partition)]
        assert state == znodes.PartitionState.decode(data, "state")
        assert (version, zxid) == (stat.version, stat.mzxid)  # the same transaction
        assert (path, raw) == (znodes.state_path(topic, partition), data)


@pytest.fixture
def chroot(ensemble):
    """A fresh chroot of the ensemble with klog's roots, and a session in it (the test's
    own: a controller, or a leader's appliance)."""
    connect = f"{ensemble.connect}/notes-{uuid.uuid4().hex[:8]}"
    session = Session(connect, session_timeout_ms=4000, connection_timeout_ms=10_000)
    session.start()
    try:
        for root in znodes.PERSISTENT_ROOTS:
            session.call("ensure_path", root)
        yield connect, session
    finally:
        session.stop()


def test_a_stuck_fleet_pass_still_shows_the_new_leaders(chroot):
    """The member's pass is held inside its read of the states (as on a loaded host with
    10,000 of them); the leaders the controller wrote show through the notes meanwhile,
    the pass, once let go, agrees with ZooKeeper, and it read none of them back."""
    connect, admin = chroot
    member = None
    try:
        paths = make_topic(admin, "stuck")
        election = elect(admin, 9)  # the test controls the fleet; the member only follows
        member = ClusterMember(connect, broker_id=2, host="127.0.0.1", session_timeout_ms=4000,
                               connection_timeout_ms=10_000)
        member.start()
        assert member.wait_for(lambda s: len(s.topics["stuck"].states) == PARTITIONS, 10)
        assert member.notes.listed.wait(10)  # notes from here on are the member's to read
        gate, held = threading.Event(), threading.Event()
        reads = member.reads.get_noted
        asked = member.reads.requests

        def slow_reads(wanted):
            held.set()
            gate.wait(30)
            return reads(wanted)
        member.reads.get_noted = slow_reads
        assert write_states(FencedWriter(admin, election), moved(paths, election.epoch)) == \
            [None] * PARTITIONS
        assert held.wait(10), "the member's pass never began to read the changed states"

        def all_moved(snapshot):
            return all(state.leader == 200 for state, _ in
                       snapshot.topics["stuck"].states.values())
        try:
            assert member.wait_for(all_moved, 10)
            assert member.notes.notes_read == 3
        finally:
            gate.set()
        member.reads.get_noted = reads
        member.wake()
        read = read_fleet(admin, None)
        assert member.wait_for(lambda s: s.topics["stuck"] == read.topics["stuck"], 10)
        # the passes took the states from the notes: none was read back
        assert member.reads.requests - asked < 10
    finally:
        if member is not None:
            member.stop()


def test_a_note_about_an_earlier_topic_of_the_same_name_is_not_applied(session):
    paths = make_topic(session, "again", 3)
    election = elect(session, 1)
    write_states(FencedWriter(session, election), moved(paths, election.epoch))
    (name, data, stat), = notes(session)
    old = state_changes.decode(data, stat.czxid, name)
    doomed = [path for path, _ in paths] + [znodes.partition_path("again", p)
                                             for p in range(3)]
    session.delete_many(doomed + [znodes.partitions_path("again"),
                                  znodes.topic_path("again")])
    make_topic(session, "again", 3)  # a new topic: its states at version 0, leader 100
    fresh = read_fleet(session, None)
    assert fresh.topics["again"].created > stat.czxid
    assert state_changes.apply_changes(fresh, old) is fresh
    # the same note on the topic it was about does apply
    before = dataclasses.replace(fresh, topics={"again": dataclasses.replace(
        fresh.topics["again"], created=stat.czxid - 1)})
    shown = state_changes.apply_changes(before, old)
    assert {s.leader for s, _ in shown.topics["again"].states.values()} == {200}


def test_a_read_older_than_a_note_does_not_take_a_state_back(session):
    paths = make_topic(session, "older", 3)
    stale = read_fleet(session, None)  # read before the write lands
    election = elect(session, 1)
    write_states(FencedWriter(session, election), moved(paths, election.epoch))
    (name, data, stat), = notes(session)
    shown = state_changes.apply_changes(stale, state_changes.decode(data, stat.czxid, name))
    assert {v for _, v in shown.topics["older"].states.values()} == {1}
    kept = state_changes.keep_newer(stale, shown)
    assert kept.topics["older"].states == shown.topics["older"].states
    # a state the read no longer has (its topic being deleted) is not brought back
    gone = dataclasses.replace(stale, topics={"older": dataclasses.replace(
        stale.topics["older"], states={})})
    assert state_changes.keep_newer(gone, shown).topics["older"].states == {}
    # a newer read wins
    fresh = read_fleet(session, None)
    assert state_changes.keep_newer(fresh, shown) is fresh


def test_the_controller_keeps_only_the_newest_notes(session, monkeypatch):
    monkeypatch.setattr(state_changes, "KEEP", 4)
    paths = make_topic(session, "pruned", 1)
    election = elect(session, 1)
    version = 0
    for epoch_leader in (200, 300) * 4:
        state = znodes.PartitionState(epoch_leader, version + 1, (200, 300), election.epoch)
        assert write_states(FencedWriter(session, election),
                            [(paths[0][0], state, version)]) == [None]
        version += 1
    kept = notes(session)
    assert len(kept) == 4
    (name, data, stat) = kept[-1]
    last_version = state_changes.decode(data, stat.czxid, name)[0].version
    assert last_version == version  # the newest kept


def test_a_note_that_does_not_parse_is_an_error_naming_it():
    with pytest.raises(znodes.ZnodeError, match="change-7"):
        state_changes.decode(b'{"states": [["/x", 1]]}', 5, "/klog/state_changes/change-7")


def test_a_leaders_isr_change_reaches_the_fleet_by_its_note(chroot, monkeypatch):
    """An ISR change written by a leader's appliance (`isr.py`) carries its note: another
    appliance sees it without a watch on the state, and the controller's passes keep the
    notes of such changes to the newest ones."""
    monkeypatch.setattr(state_changes, "KEEP", 4)
    connect, leader = chroot
    member = None
    try:
        make_topic(leader, "shrunk", 1)
        for node in (100, 200, 300):  # every replica live: the controller leaves them be
            leader.register(znodes.broker_path(node), znodes.BrokerRegistration(
                node, "127.0.0.1", 9000 + node, None).encode())
        member = ClusterMember(connect, broker_id=1, host="127.0.0.1", session_timeout_ms=4000,
                               connection_timeout_ms=10_000)
        member.start()
        assert member.wait_for(lambda s: s.controller == 1 and len(s.brokers) == 3, 10)
        asked = member.reads.requests
        for round_ in range(4):
            for isr in ((100, 200), (100, 200, 300)):
                assert isr_changes.alter_partition(leader, "shrunk", 0, 0, isr, 100) == \
                    ErrorCode.NONE
                assert member.wait_for(lambda s, isr=isr: s.topics["shrunk"].states[0][0].isr
                                       == isr, 10), (round_, isr)
        assert member.reads.requests - asked < 8  # from the notes, not read back
        member.wake()
        wait_until(lambda: len(leader.call("get_children", state_changes.ROOT)) <=
                   state_changes.KEEP + state_changes.KEEP // 4, 10, "the notes pruned")
    finally:
        if member is not None:
            member.stop()


def test_states_written_one_by_one_after_a_conflict_carry_notes_too(session):
    """A group of states that fails because one changed meanwhile is written again one
    state per multi: each of those carries its note as well (the other appliances follow
    states by notes only)."""
    paths = make_topic(session, "raced", controller.GROUP)  # one group
    stale = 7
    session.call("set", paths[stale][0], znodes.PartitionState(100, 0, (100, 200), 1).encode())
    election = elect(session, 1)
    errors = write_states(FencedWriter(session, election), moved(paths, election.epoch))
    assert [i for i, e in enumerate(errors) if e is not None] == [stale]
    noted = {(change.path, change.version) for name, data, stat in notes(session)
             for change in state_changes.decode(data, stat.czxid, name)}
    assert noted == {(path, 1) for i, (path, _) in enumerate(paths) if i != stale}


def test_a_note_that_does_not_parse_makes_the_follower_read_everything_again(session):
    """Its states are neither shown nor watched: the appliance must read them all again."""
    missed = threading.Event()
    follower = state_changes.StateChangeFollower(session, lambda changes: None,
                                                 missed=missed.set)
    assert follower.poll() == 0  # the first listing
    session.call("create", state_changes.PREFIX, b"not a note", sequence=True)
    assert follower.poll() == 0
    assert missed.is_set()


def test_many_isr_changes_go_in_one_multi_with_one_note_each_answered(session, monkeypatch):
    """A burst of leaders' ISR asks (a broker back in every ISR, `isr.alter_partitions`):
    read together, written in one multi per BATCH with one note each, and every ask gets
    what `alter_partition` alone would have answered."""
    monkeypatch.setattr(isr_changes, "BATCH", 8)
    make_topic(session, "burst", 12)
    shrunk = znodes.PartitionState(100, 0, (100, 200), 1).encode()
    for p in range(12):
        session.call("set", znodes.state_path("burst", p), shrunk)
    before = len(notes(session))
    replicas = (100, 200, 300)
    asks = [isr_changes.IsrAsk("burst", p, 0, replicas, 100, replicas) for p in range(10)]
    asks += [
        isr_changes.IsrAsk("burst", 10, 1, replicas, 100, replicas),  # an epoch ahead
        isr_changes.IsrAsk("burst", 11, 0, (200, 300), 100, replicas),  # leader not in it
        isr_changes.IsrAsk("burst", 99, 0, replicas, 100, None),  # no such partition
        isr_changes.IsrAsk("burst", 11, 0, (100, 200), 100, replicas),  # already so
    ]
    errors = isr_changes.alter_partitions(session, asks)
    assert errors == [ErrorCode.NONE] * 10 + [
        ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.INVALID_REQUEST,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE]
    states = [znodes.PartitionState.decode(data, "")
              for data, _ in session.get_many([znodes.state_path("burst", p)
                                               for p in range(12)])]
    assert [s.isr for s in states] == [replicas] * 10 + [(100, 200)] * 2
    written = notes(session)[before:]
    assert len(written) == 2  # ten states, eight per multi: two multis, a note each
    changes = [c for name, data, stat in written
               for c in state_changes.decode(data, stat.czxid, name)]
    assert sorted((c.partition, c.state.isr) for c in changes) == [
        (p, replicas) for p in range(10)]


def test_a_burst_whose_multi_fails_is_done_again_one_ask_at_a_time(session):
    """Two asks for one partition in one burst: the multi holding both fails (the second
    write's version is stale once the first is applied), and each ask is then done alone,
    in order, re-reading the state each time: the later one wins, as one at a time would."""
    make_topic(session, "twice", 2)
    replicas = (100, 200, 300)
    asks = [isr_changes.IsrAsk("twice", 0, 0, (100, 200), 100, replicas),
            isr_changes.IsrAsk("twice", 1, 0, (100, 300), 100, replicas),
            isr_changes.IsrAsk("twice", 0, 0, (100,), 100, replicas)]
    before = len(notes(session))
    assert isr_changes.alter_partitions(session, asks) == [ErrorCode.NONE] * 3
    isrs = [znodes.PartitionState.decode(data, "").isr for data, _ in session.get_many(
        [znodes.state_path("twice", p) for p in range(2)])]
    assert isrs == [(100,), (100, 300)]
    assert len(notes(session)) - before == 3  # each state written alone, each with a note


def test_only_a_note_the_snapshot_cannot_show_asks_for_a_read():
    """A member that does not control the fleet passes again after a note only when the
    note names a topic (or partition) its snapshot lacks, or an older topic of the name:
    anything else the note itself showed (`ClusterMember._noted`)."""
    state = znodes.PartitionState(200, 1, (200, 300), 2)
    topic = TopicState("t", {0: (100, 200, 300), 1: (100, 200, 300)}, 0, created=50)
    snapshot = FleetSnapshot(topics={"t": topic})

    def change(name: str, partition: int, zxid: int) -> state_changes.Change:
        return state_changes.Change(name, partition, state, 1, zxid, "", b"")

    assert not state_changes.unknown_topics(snapshot, [change("t", 0, 60), change("t", 1, 61)])
    assert state_changes.unknown_topics(snapshot, [change("t", 0, 60), change("u", 0, 61)])
    assert state_changes.unknown_topics(snapshot, [change("t", 2, 60)])  # added, not read yet
    assert state_changes.unknown_topics(snapshot, [change("t", 0, 40)])  # an earlier "t"
