"""The fleet pass's cache of znodes under watches (cluster/watched_reads.py), against a real
three-server ensemble: nothing is asked again until its watch fires, what another client
changes is read again, our own writes are seen by the next pass, and a new session reads
everything again (its watches are gone). Once every appliance writes notes, partition
states are followed by them, not watched: a note's state replaces the cached one without a
read, an older note does not, and a state missing is watched for its creation; while one
appliance from before the notes is live, states are watched as before."""

import pytest
from kazoo.client import KazooClient

from cluster import znodes
from cluster.fleet_view import read_fleet, read_snapshot
from cluster.watched_reads import WatchedReads
from tests.polling import wait_until


@pytest.fixture
def other(ensemble, session):
    """Another client of the same chroot (another appliance, the command line)."""
    client = KazooClient(hosts=f"{ensemble.connect}{session.chroot}")
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def add_topic(client, name: str, partitions: int) -> None:
    replicas = {p: (100, 200) for p in range(partitions)}
    client.create(znodes.topic_path(name), znodes.TopicAssignment(replicas).encode())
    for p in range(partitions):
        client.create(znodes.state_path(name, p),
                      znodes.PartitionState(100, 0, (100, 200), 1).encode(), makepath=True)


def state_of(snapshot, name: str, partition: int) -> znodes.PartitionState:
    return snapshot.topics[name].states[partition][0]


def test_a_pass_asks_only_for_what_changed(session, other):
    add_topic(other, "orders", 8)
    reads = WatchedReads(session)
    first = read_snapshot(reads)
    assert first == read_fleet(session, None)
    asked = reads.requests
    reads.catch_up()
    assert read_snapshot(reads) == first and reads.requests == asked  # nothing changed
    grown = znodes.TopicAssignment({p: (100, 200) for p in range(9)}).encode()
    other.set(znodes.topic_path("orders"), grown)
    wait_until(lambda: reads.catch_up() or len(read_snapshot(reads).topics["orders"].replicas)
               == 9, 10, "the changed assignment")
    # that assignment, and the new partition's state (missing: watched for its creation)
    assert reads.requests == asked + 2
    other.create(znodes.state_path("orders", 8),
                 znodes.PartitionState(200, 0, (200,), 1).encode(), makepath=True)
    wait_until(lambda: reads.catch_up() or 8 in read_snapshot(reads).topics["orders"].states,
               10, "the created state")
    assert read_snapshot(reads) == read_fleet(session, None)


def register(client, broker_id: int, state_notes: bool) -> None:
    client.create(znodes.appliance_path(broker_id), znodes.ApplianceRegistration(
        broker_id, None, "127.0.0.1", state_notes).encode(), makepath=True)


def test_states_are_watched_until_every_appliance_writes_notes(session, other):
    """A fleet in a rolling upgrade: while an appliance from before the notes is live, its
    ISR changes come without one, so every state is watched as before; once it is gone,
    states are followed by their notes."""
    add_topic(other, "rolling", 2)
    register(other, 1, True)
    register(other, 2, False)  # from before the notes
    reads = WatchedReads(session)
    read_snapshot(reads)
    path = znodes.state_path("rolling", 1)
    other.set(path, znodes.PartitionState(100, 0, (100,), 1).encode())  # no note
    wait_until(lambda: reads.catch_up() or state_of(read_snapshot(reads), "rolling", 1).isr
               == (100,), 10, "the watched state")
    other.delete(znodes.appliance_path(2))
    wait_until(lambda: reads.catch_up() or 2 not in read_snapshot(reads).appliances, 10,
               "the old appliance gone")
    # the watch armed while watching fires once more; the state is read again, unwatched
    other.set(path, znodes.PartitionState(100, 0, (100, 200), 1).encode())  # no note
    wait_until(lambda: reads.catch_up() or state_of(read_snapshot(reads), "rolling", 1).isr
               == (100, 200), 10, "the last watched change")
    other.set(path, znodes.PartitionState(100, 0, (100,), 1).encode())  # no note
    session.call("sync", path)  # any event of that write reaches us before this answer
    reads.catch_up()
    assert state_of(read_snapshot(reads), "rolling", 1).isr == (100, 200)  # not watched now
    register(other, 3, False)  # one from before the notes comes back: watched again
    wait_until(lambda: reads.catch_up() or state_of(read_snapshot(reads), "rolling", 1).isr
               == (100,), 10, "the state read again under a watch")


def test_a_noted_state_is_taken_from_its_note_without_a_read(session, other):
    add_topic(other, "noted", 4)
    register(other, 1, True)
    reads = WatchedReads(session)
    read_snapshot(reads)
    asked = reads.requests
    path = znodes.state_path("noted", 2)
    newer = znodes.PartitionState(200, 1, (200,), 1).encode()
    other.set(path, newer)  # as a noted write does; no watch tells the reader
    _, stat = other.get(path)
    reads.catch_up()
    assert state_of(read_snapshot(reads), "noted", 2).leader == 100  # not watched
    reads.note([(path, newer, stat.version, stat.mzxid)])
    assert state_of(read_snapshot(reads), "noted", 2).leader == 200
    assert reads.requests == asked
    # a note older than what is held changes nothing
    reads.note([(path, znodes.PartitionState(300, 0, (300,), 1).encode(), 0, stat.mzxid - 1)])
    assert read_snapshot(reads) == read_fleet(session, None)


def test_new_and_deleted_nodes_are_seen(session, other):
    reads = WatchedReads(session)
    assert read_snapshot(reads).reassign_request is None  # missing: watched for creation
    add_topic(other, "later", 2)
    other.create(znodes.REASSIGN_PARTITIONS, znodes.ReassignmentRequest(
        (("later", 0, (200, 100)),)).encode())
    wait_until(lambda: reads.catch_up() or (
        "later" in (s := read_snapshot(reads)).topics and s.reassign_request is not None),
        10, "the new topic and request")
    other.delete(znodes.REASSIGN_PARTITIONS)
    other.delete(znodes.topic_path("later"), recursive=True)
    wait_until(lambda: reads.catch_up() or (
        "later" not in (s := read_snapshot(reads)).topics and s.reassign_request is None),
        10, "the deletions")


def test_our_own_writes_are_seen_by_the_next_pass(session):
    add_topic(session.client, "mine", 1)
    session.call("create", znodes.topic_config_path("mine"), znodes.TopicConfig({}).encode(),
                 makepath=True)
    reads = WatchedReads(session)
    read_snapshot(reads)
    path = znodes.topic_config_path("mine")
    for epoch in range(1, 30):
        session.call("set", path, znodes.TopicConfig({"retention.ms": str(epoch)}).encode())
        reads.catch_up()
        assert read_snapshot(reads).topics["mine"].config == {"retention.ms": str(epoch)}


def test_a_new_session_reads_everything_again(ensemble, session, other):
    add_topic(other, "kept", 2)
    reads = WatchedReads(session)
    session.on_state = lambda state: reads.invalidate()  # as ClusterMember does
    assert state_of(read_snapshot(reads), "kept", 1).leader_epoch == 0
    twin = KazooClient(hosts=ensemble.connect, client_id=session.client.client_id)
    twin.start(timeout=10)  # expires our session from ZooKeeper's side
    twin.stop()
    twin.close()
    # changed while our session was gone: no watch of ours is left to tell us
    other.set(znodes.state_path("kept", 1), znodes.PartitionState(200, 5, (200,), 1).encode())
    wait_until(lambda: session.state == "CONNECTED", 20, "a new session")
    wait_until(lambda: state_of(read_snapshot(reads), "kept", 1).leader_epoch == 5, 10,
               "the change made while the session was away")


def test_the_safety_net_reads_each_node_again_within_the_interval_spread_over_passes(
        session, other):
    """A node changed behind the watches' back (as a lost event would leave it) is read
    again within `refresh_s`; the re-reads of many nodes come over the interval's second
    half, not in one pass."""
    add_topic(other, "netted", 40)
    now = [0.0]
    reads = WatchedReads(session, refresh_s=60.0, clock=lambda: now[0])
    first = read_snapshot(reads)
    cached = reads.requests
    reads._data[znodes.state_path("netted", 7)] = (  # a stale value no event will drop
        znodes.PartitionState(300, 9, (300,), 1).encode(), reads._data[
            znodes.state_path("netted", 7)][1])
    assert state_of(read_snapshot(reads), "netted", 7).leader == 300
    now[0] = 29.9
    assert reads.expire() == 0
    expired = []
    for second in range(30, 61, 5):
        now[0] = float(second)
        expired.append(reads.expire())
        read_snapshot(reads)
    assert sum(expired) == reads.requests - cached >= 40  # every node once, at least
    assert max(expired) < sum(expired) / 2  # spread, not one pass
    assert read_snapshot(reads) == first and state_of(first, "netted", 7).leader == 100
