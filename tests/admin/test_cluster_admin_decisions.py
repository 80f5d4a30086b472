"""The fleet's answers to ElectLeaders and AlterPartitionReassignments, decided on a snapshot
(cluster/admin_elections.py, cluster/admin_reassignments.py): Kafka's codes per partition."""

from __future__ import annotations

from cluster.admin_elections import decide
from cluster.admin_reassignments import check, ongoing
from klog.protocol.error_codes import ErrorCode
from tests.cluster.snapshots import State, snapshot, topic

R = (100, 200, 300)


def elected(snap, partition=0, unclean=False):
    (code, _), state, _ = decide(snap, "t", partition, unclean=unclean, controller_epoch=7)
    return code, state


def test_preferred_elections():
    led_by_second = topic(replicas={0: R}, states={0: (State(200, 4, R, 1), 3)})
    code, state = elected(snapshot([led_by_second]))
    assert code == ErrorCode.NONE and state == State(100, 5, R, 7)
    assert elected(snapshot([topic(replicas={0: R})]))[0] == ErrorCode.ELECTION_NOT_NEEDED
    out_of_isr = topic(replicas={0: R}, states={0: (State(200, 4, (200, 300), 1), 3)})
    assert elected(snapshot([out_of_isr])) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    dead = snapshot([led_by_second], appliances=(2, 3))
    assert elected(dead) == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    assert elected(snapshot([topic()]), 9)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert elected(snapshot([]))[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_unclean_elections():
    offline = topic(replicas={0: R}, states={0: (State(-1, 4, (100,), 1), 3)})
    # the only in-sync replica is gone: the first live replica leads alone
    code, state = elected(snapshot([offline], appliances=(2, 3)), unclean=True)
    assert code == ErrorCode.NONE and state == State(200, 5, (200,), 7)
    # an in-sync replica is live: a clean election comes first
    code, state = elected(snapshot([offline]), unclean=True)
    assert code == ErrorCode.NONE and state == State(100, 5, (100,), 7)
    assert elected(snapshot([offline], appliances=(4,)), unclean=True) == (
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None)
    assert elected(snapshot([topic()]), unclean=True)[0] == ErrorCode.ELECTION_NOT_NEEDED


def test_reassignment_checks():
    snap = snapshot([topic(replicas={0: R})])
    assert check(snap, "t", 0, (400, 100)) == ((ErrorCode.NONE, None), (400, 100))
    for bad in ((900, 100), (100, 100), (100, 101), ()):
        (code, message), target = check(snap, "t", 0, bad)
        assert (code, target) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, None) and message
    assert check(snap, "t", 5, R)[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert check(snap, "u", 0, R)[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert check(snap, "t", 0, None)[0][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_cancelling_and_listing_a_move_in_flight():
    moving = topic(replicas={0: (400, 100, 200, 300), 1: R}, adding={0: (400,)},
                   removing={0: (300,)})
    snap = snapshot([moving])
    assert check(snap, "t", 0, None) == ((ErrorCode.NONE, None), R)  # back to the original
    assert ongoing(snap, None) == {"t": [(0, (400, 100, 200, 300), (400,), (300,))]}
    assert ongoing(snap, [("t", [1]), ("u", [0])]) == {}
