"""Partition reassignment's decisions on the controller's side (cluster/reassignment.py),
pure: a move's start and finish, a cancelled move's pruning and taking a request up, on
fleets written out by hand."""

from cluster import znodes
from cluster.reassignment import (
    Move,
    accept_request,
    finish_move,
    finishing,
    prune_state,
    pruning,
    start_move,
)
from tests.cluster.snapshots import State, snapshot, topic


def test_a_move_runs_on_target_plus_original_and_names_what_it_adds_and_removes():
    move = start_move(Move((100, 200, 300)), (200, 300, 400))
    assert move == Move((200, 300, 400, 100), adding=(400,), removing=(100,))
    assert move.target == (200, 300, 400)
    assert move.original == (200, 300, 100)  # its replicas, in the order the move keeps them


def test_a_new_target_for_a_moving_partition_starts_from_its_original_replicas():
    moving = Move((200, 300, 400, 100), adding=(400,), removing=(100,))
    assert start_move(moving, (100, 200, 300)) == Move((100, 200, 300))  # a cancel
    assert start_move(moving, (500, 200, 300)) == Move((500, 200, 300, 100), (500,), (100,))


def test_a_move_waits_until_every_target_replica_is_in_the_isr():
    move = Move((200, 300, 400, 100), adding=(400,), removing=(100,))
    catching_up = State(100, 3, (100, 200, 300), 1)
    assert finish_move(move, catching_up, {100, 200, 300, 400}, 2) is None


def test_a_leader_that_is_removed_hands_over_to_a_target_replica_in_a_new_epoch():
    move = Move((400, 200, 300, 100), adding=(400,), removing=(100,))
    caught_up = State(100, 3, (100, 200, 300, 400), 1)
    assert finish_move(move, caught_up, {100, 200, 300, 400}, 2) == \
        State(400, 4, (200, 300, 400), 2)  # the target's first replica, in the ISR, leads


def test_a_leader_that_stays_keeps_its_epoch_and_the_removed_replicas_leave_the_isr():
    move = Move((200, 300, 400, 100), adding=(400,), removing=(100,))
    caught_up = State(300, 3, (100, 200, 300, 400), 1)
    assert finish_move(move, caught_up, {100, 200, 300, 400}, 2) == \
        State(300, 3, (200, 300, 400), 2)


def test_the_new_leader_comes_from_the_isr_and_is_live():
    move = Move((400, 200, 300, 100), adding=(400,), removing=(100,))
    state = State(100, 3, (100, 200, 300, 400), 1)
    assert finish_move(move, state, {100, 200, 300}, 2).leader == 200  # 400 is not live
    assert finish_move(move, state, {100}, 2) is None  # no live target replica to lead


def test_a_cancelled_move_takes_its_added_replicas_out_of_the_isr_and_the_lead():
    live = {100, 200, 300, 400}
    original = (100, 200, 300)
    assert prune_state(original, State(100, 3, (100, 200, 300, 400), 1), live, 2) == \
        State(100, 3, (100, 200, 300), 2)
    # the added replica was elected in a failover: an original one in the ISR takes over
    assert prune_state(original, State(400, 4, (400, 200), 1), live, 2) == \
        State(200, 5, (200,), 2)
    assert prune_state(original, State(400, 4, (400,), 1), live, 2) == \
        State(-1, 5, (400,), 2)  # offline rather than an unclean election
    assert prune_state(original, State(100, 3, (100, 200), 1), live, 2) is None
    cancelled = topic(states={0: (State(400, 4, (400, 200, 300), 1), 7),
                              1: (State(200, 0, (200, 300, 100), 1), 7),
                              2: (State(300, 0, (300, 100, 200), 1), 7)})
    assert pruning(cancelled, live, 2) == {0: State(200, 5, (200, 300), 2)}


def test_a_request_is_taken_up_partition_by_partition_and_bad_entries_are_left_out():
    request = znodes.ReassignmentRequest((("t", 0, (200, 300, 400)), ("t", 9, (100,)),
                                          ("gone", 0, (100,)), ("t", 1, (200, 201))))
    assignments, refused = accept_request(snapshot([topic()], request=request))
    assert assignments["t"].partitions[0] == (200, 300, 400, 100)
    assert assignments["t"].adding == {0: (400,)} and assignments["t"].removing == {0: (100,)}
    assert assignments["t"].partitions[1] == (200, 300, 100)  # untouched
    assert len(refused) == 3 and "no such partition" in refused[0]
    assert "does not exist" in refused[1] and "two replicas on appliance(s) [2]" in refused[2]


def test_only_the_moves_whose_targets_are_in_sync_finish():
    moving = topic(replicas={0: (200, 300, 400, 100), 1: (300, 400, 100, 200)},
                   adding={0: (400,), 1: (400,)}, removing={0: (100,), 1: (200,)},
                   states={0: (State(100, 0, (100, 200, 300, 400), 1), 5),
                           1: (State(300, 0, (300, 100, 200), 1), 5)})
    done = finishing(moving, set(snapshot().brokers), 2)
    assert done == {0: State(200, 1, (200, 300, 400), 2)}
