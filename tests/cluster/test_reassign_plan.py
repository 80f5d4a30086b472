"""The reassignment command's plans (cluster/reassign_plan.py), pure: parsing Kafka's plan
format, the checks, --generate, --verify and the throttles, on fleets written out by hand."""

import orjson
import pytest

from cluster import znodes
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
from tests.cluster.snapshots import snapshot, topic


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
