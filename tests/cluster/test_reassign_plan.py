"""Partition reassignment's decisions, pure: the controller's state machine (start, finish,
taking a request up) and the command's plans (parsing, checks, --generate, --verify,
throttles), on fleets written out by hand."""

import orjson
import pytest

from cluster import znodes
from cluster.fleet_view import FleetSnapshot, TopicState
from cluster.reassign_plan import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    Plan,
    PlanError,
    check_plan,
    current_plan,
    involved_nodes,
    keep_disks,
    nodes_of_appliances,
    parse_nodes,
    parse_plan,
    parse_topics,
    progress,
    propose,
    throttle_configs,
)
from cluster.reassignment import (
    Move,
    accept_request,
    finish_move,
    finishing,
    prune_state,
    pruning,
    start_move,
)

State = znodes.PartitionState


def snapshot(topics=(), appliances=(1, 2, 3, 4), workers=2, request=None) -> FleetSnapshot:
    brokers = {a * 100 + w: znodes.BrokerRegistration(a * 100 + w, "127.0.0.1", 9000,
                                                      f"rack-{a}")
               for a in appliances for w in range(workers)}
    return FleetSnapshot(brokers=brokers, topics={t.name: t for t in topics},
                         reassign_request=request)


def topic(name="t", replicas=None, adding=None, removing=None, states=None) -> TopicState:
    replicas = replicas or {0: (100, 200, 300), 1: (200, 300, 100), 2: (300, 100, 200)}
    states = states or {p: (State(r[0], 0, r, 1), 0) for p, r in replicas.items()}
    return TopicState(name, replicas, 0, states, {}, adding or {}, removing or {})


# the controller's state machine -------------------------------------------------------------

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


def test_the_assignment_znode_records_a_move_as_kip_455_does():
    assignment = znodes.TopicAssignment({0: (200, 300, 400, 100), 1: (100,)}, {0: (400,)},
                                        {0: (100,)})
    raw = orjson.loads(assignment.encode())
    assert raw == {"version": 2, "partitions": {"0": [200, 300, 400, 100], "1": [100]},
                   "adding_replicas": {"0": [400]}, "removing_replicas": {"0": [100]}}
    assert znodes.TopicAssignment.decode(assignment.encode(), "/t") == assignment
    request = znodes.ReassignmentRequest((("t", 0, (1, 2)),))
    assert orjson.loads(request.encode()) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}
    with pytest.raises(znodes.ZnodeError, match="not a reassignment request"):
        znodes.ReassignmentRequest.decode(b'{"partitions": [{"topic": "t"}]}')


# plans --------------------------------------------------------------------------------------

def test_a_plan_in_kafkas_format_round_trips():
    text = ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[200,300,400],'
            '"log_dirs":["any","any","any"]}]}')
    plan = parse_plan(text)
    assert plan == Plan((("t", 0, (200, 300, 400)),))
    assert parse_plan(plan.to_json()) == plan


@pytest.mark.parametrize("text, message", [
    ("{not json", "is not JSON"),
    ("[1]", "must be a JSON object"),
    ('{"version":2,"partitions":[]}', "version 2 is not supported"),
    ('{"version":1}', 'no "partitions" list'),
    ('{"partitions":[{"partition":0,"replicas":[1]}]}', 'no "topic" name'),
    ('{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}', "must be an integer"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":"1,2"}]}', "a list of node ids"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}',
     "log_dirs"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[100]},'
     '{"topic":"t","partition":0,"replicas":[200]}]}', "t-0 is listed more than once"),
])
def test_a_malformed_plan_is_refused_naming_what_is_wrong(text, message):
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


def test_check_plan_names_every_entry_the_fleet_would_refuse():
    plan = parse_plan(orjson.dumps({"version": 1, "partitions": [
        {"topic": "nope", "partition": 0, "replicas": [100]},
        {"topic": "t", "partition": 7, "replicas": [100]},
        {"topic": "u", "partition": 0, "replicas": []},
        {"topic": "t", "partition": 1, "replicas": [200, 200, 300]},
        {"topic": "t", "partition": 2, "replicas": [300, 100, 900]},
        {"topic": "__consumer_offsets", "partition": 0, "replicas": [100]},
        {"topic": "t", "partition": 0, "replicas": [101, 200, 300]},
    ]}).decode())
    with pytest.raises(PlanError) as refused:
        check_plan(plan, snapshot([topic(), topic("u")]))
    lines = str(refused.value).splitlines()[1:]
    assert len(lines) == 7
    for line, expected in zip(lines, [
            "topic 'nope' does not exist", "t-7: no such partition",
            "u-0: the replica list is empty", "t-1: node(s) [200] listed more than once",
            "t-2: node(s) [900] are not live nodes", "__consumer_offsets is an internal topic",
            "t-0: node 101 is on appliance 1, whose node 100 holds the replica now"]):
        assert expected in line, (line, expected)
    check_plan(parse_plan('{"partitions":[{"topic":"t","partition":0,"replicas":[400,100]}]}'),
               snapshot([topic()]))  # a good plan passes (replication factor may change)


def test_topic_and_node_lists_are_parsed_strictly():
    assert parse_topics('{"version":1,"topics":[{"topic":"a"},{"topic":"b"},{"topic":"a"}]}') \
        == ["a", "b"]
    with pytest.raises(PlanError, match="no \"topics\" list"):
        parse_topics('{"version":1}')
    assert parse_nodes("100, 200,300") == (100, 200, 300)
    for bad in ("", "1,x", "1,1"):
        with pytest.raises(PlanError):
            parse_nodes(bad)
    assert nodes_of_appliances(snapshot(), (2, 4)) == (200, 201, 400, 401)
    with pytest.raises(PlanError, match=r"appliance\(s\) \[7\] have no live node"):
        nodes_of_appliances(snapshot(), (1, 7))


def test_generate_spreads_the_topic_over_the_new_appliance_without_changing_disks():
    fleet = snapshot([topic(replicas={p: (100, 200, 300) for p in range(4)})])
    proposed = propose(fleet, ["t"], nodes_of_appliances(fleet, (1, 2, 3, 4)))
    per_appliance = {}
    for _, _, replicas in proposed.partitions:
        assert len({r // 100 for r in replicas}) == 3
        for r in replicas:
            per_appliance[r // 100] = per_appliance.get(r // 100, 0) + 1
            if r // 100 in (1, 2, 3):
                assert r % 100 == 0  # kept on the disk that holds it
    assert per_appliance == {1: 3, 2: 3, 3: 3, 4: 3}  # the fourth takes its share
    check_plan(proposed, fleet)
    assert current_plan(fleet, [("t", 0)]) == Plan((("t", 0, (100, 200, 300)),))
    with pytest.raises(PlanError, match="replication factor 3 is larger than the 2 live"):
        propose(fleet, ["t"], (100, 200))
    with pytest.raises(PlanError, match=r"node\(s\) \[900\] are not live"):
        propose(fleet, ["t"], (100, 900))
    assert keep_disks((101, 400), (100, 200)) == (100, 400)


def test_verify_tells_completed_from_in_progress_and_failed():
    moving = topic(replicas={0: (200, 300, 400, 100), 1: (100, 200, 300), 2: (100, 200, 300)},
                   adding={0: (400,)}, removing={0: (100,)})
    plan = Plan((("t", 0, (200, 300, 400)), ("t", 1, (100, 200, 300)), ("t", 2, (400, 200)),
                 ("t", 5, (100,))))
    found = progress(plan, snapshot([moving]))
    assert [found[("t", p)].state for p in (0, 1, 2, 5)] == \
        ["in progress", "completed", "failed", "failed"]
    waiting = snapshot([moving], request=znodes.ReassignmentRequest((("t", 1, (400,)),)))
    assert progress(Plan((("t", 1, (400,)),)), waiting)[("t", 1)].state == "in progress"


def test_the_throttle_lists_the_replicas_there_now_as_leaders_and_the_added_as_followers():
    fleet = snapshot([topic()])
    plan = Plan((("t", 0, (200, 300, 400)), ("t", 1, (200, 300, 100))))  # 1 does not move
    assert throttle_configs(plan, fleet) == {
        "t": {LEADER_REPLICAS: "0:100,0:200,0:300", FOLLOWER_REPLICAS: "0:400"}}
    assert involved_nodes(plan, fleet) == [100, 200, 300, 400]
