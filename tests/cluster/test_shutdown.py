"""Controlled shutdown, the leaving appliance's side (cluster/shutdown.py): what is left for
the controller to move, read from snapshots written out by hand."""

from dataclasses import replace

from cluster.shutdown import leading, pending
from tests.cluster.snapshots import State, snapshot, topic

OURS = {100, 101}  # appliance 1's nodes


def test_what_we_lead_and_the_isrs_we_sit_in_are_pending():
    fleet = snapshot([topic()])  # t-0 led by 100, t-1 and t-2 followed by 100
    assert pending(fleet, OURS) == ["t-0", "t-1", "t-2"]
    assert leading(fleet, OURS) == ["t-0"]


def test_once_moved_nothing_is_pending_and_nothing_led():
    moved = topic(states={0: (State(200, 1, (200, 300), 2), 0),
                          1: (State(200, 0, (200, 300), 2), 0),
                          2: (State(300, 0, (300, 200), 2), 0)})
    fleet = snapshot([moved])
    assert pending(fleet, OURS) == [] and leading(fleet, OURS) == []


def test_a_partition_with_no_other_in_sync_replica_left_to_take_it_is_not_pending():
    alone = topic("alone", replicas={0: (100, 200)},
                  states={0: (State(100, 3, (100,), 1), 0)})
    assert pending(snapshot([alone]), OURS) == []
    assert leading(snapshot([alone]), OURS) == ["alone-0"]  # it keeps leading meanwhile


def test_an_in_sync_replica_on_an_appliance_also_shutting_down_takes_nothing_over():
    pair = topic("pair", replicas={0: (100, 200)},
                 states={0: (State(100, 3, (100, 200), 1), 0)})
    assert pending(snapshot([pair]), OURS) == ["pair-0"]
    both_leaving = replace(snapshot([pair]), shutting_down=frozenset({2}))
    assert pending(both_leaving, OURS) == []


def test_a_topic_being_deleted_is_left_out():
    fleet = replace(snapshot([topic(), topic("u")]), deleting=frozenset({"t"}))
    assert pending(fleet, OURS) == ["u-0", "u-1", "u-2"]
    assert leading(fleet, OURS) == ["u-0"]
