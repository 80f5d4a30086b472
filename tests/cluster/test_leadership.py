"""Leadership decisions (cluster/leadership.py): pure functions, checked by example and as
properties over random fleets."""

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster import controller
from cluster.leadership import (
    ALREADY,
    CONTROLLED_SHUTDOWN,
    ELECTED,
    ISR_SHRINK,
    LEADER_GONE,
    NOT_AVAILABLE,
    OFFLINE,
    PREFERRED,
    UNCLEAN,
    elect_preferred,
    imbalanced,
    nodes_of,
    settle,
    shutdown_pending,
    unclean_enabled,
    why_not_preferred,
)
from cluster.znodes import PartitionState

C = 7  # the controller epoch of the deciding controller
ALL_NODES = [a * 100 + w for a in (1, 2, 3, 4) for w in (0, 1)]


def state(leader, epoch, isr):
    return PartitionState(leader, epoch, tuple(isr), 1)


def decide(current, replicas, live, shutting=(), unclean=False):
    return settle(current, tuple(replicas), live=set(live), shutting=set(shutting),
                  unclean=unclean, controller_epoch=C)


# settling ------------------------------------------------------------------------------------

def test_a_gone_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order():
    change = decide(state(101, 4, [101, 201, 301]), [101, 301, 201], live=[201, 301])
    assert change.state == PartitionState(301, 5, (201, 301), C) and change.reason == LEADER_GONE


def test_no_live_isr_member_takes_the_partition_offline_keeping_its_isr():
    change = decide(state(101, 4, [101]), [101, 201], live=[201])
    assert change.state == PartitionState(-1, 5, (101,), C) and change.reason == OFFLINE
    assert decide(change.state, [101, 201], live=[201]) is None  # stays offline, quietly
    back = decide(change.state, [101, 201], live=[101, 201])
    assert back.state == PartitionState(101, 6, (101,), C)  # its last ISR member returns


def test_unclean_election_takes_any_live_replica_alone_in_its_isr():
    change = decide(state(101, 4, [101]), [101, 201, 301], live=[301, 201], unclean=True)
    assert change.state == PartitionState(201, 5, (201,), C) and change.reason == UNCLEAN
    offline = state(-1, 5, [101])  # an offline partition is revived the same way
    assert decide(offline, [101, 201], live=[201], unclean=True).state.leader == 201
    # an in-sync replica is preferred even when unclean election is allowed
    assert decide(state(101, 4, [101, 301]), [101, 201, 301], live=[201, 301],
                  unclean=True).state.leader == 301


def test_a_leader_shutting_down_hands_over_to_an_eligible_isr_member():
    change = decide(state(101, 4, [101, 201, 301]), [101, 201, 301], live=[101, 201, 301],
                    shutting=[101])
    assert change.state == PartitionState(201, 5, (201, 301), C)
    assert change.reason == CONTROLLED_SHUTDOWN


def test_a_leader_shutting_down_with_no_other_in_sync_replica_keeps_leading():
    assert decide(state(101, 4, [101]), [101, 201], live=[101, 201], shutting=[101]) is None
    # two appliances leaving at once: neither is a candidate for the other
    change = decide(state(101, 4, [101, 201]), [101, 201], live=[101, 201],
                    shutting=[101, 201])
    assert change.state == PartitionState(101, 4, (101,), C) and change.reason == ISR_SHRINK


def test_followers_gone_or_shutting_down_leave_the_isr_in_the_same_epoch():
    change = decide(state(201, 4, [101, 201, 301]), [101, 201, 301], live=[101, 201],
                    shutting=[101])
    assert change.state == PartitionState(201, 4, (201,), C) and change.reason == ISR_SHRINK


def test_a_shutting_down_node_never_leads_even_when_it_is_the_last_in_sync():
    change = decide(state(201, 4, [101, 201]), [101, 201], live=[101], shutting=[101])
    assert change.state.leader == -1 and change.state.isr == (101, 201)
    # unclean or not: the only live replica is leaving (301 holds no replica)
    change = decide(state(201, 4, [101]), [101, 201], live=[101, 301], shutting=[101],
                    unclean=True)
    assert change.state == PartitionState(-1, 5, (101,), C)
    assert decide(state(-1, 4, [101]), [101, 201], live=[101], shutting=[101],
                  unclean=True) is None


nodes = st.sampled_from(ALL_NODES)


@st.composite
def partitions(draw):
    """A partition's replicas (distinct appliances), a state, live nodes and leaving ones."""
    appliances = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3,
                               unique=True))
    replicas = tuple(a * 100 + draw(st.sampled_from([0, 1])) for a in appliances)
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    leader = draw(st.sampled_from(isr + [-1]))
    live = set(draw(st.lists(nodes, unique=True)))
    shutting = nodes_of(draw(st.lists(st.sampled_from([1, 2, 3, 4]), unique=True)), ALL_NODES)
    return replicas, state(leader, draw(st.integers(0, 50)), isr), live, shutting


@settings(derandomize=True, max_examples=400, deadline=None)
@given(case=partitions(), unclean=st.booleans())
def test_settling_elects_only_eligible_replicas_and_reaches_a_fixpoint(case, unclean):
    replicas, current, live, shutting = case
    change = decide(current, replicas, live, shutting, unclean)
    if change is None:
        return
    new = change.state
    if new.leader >= 0:
        assert new.leader in replicas and new.leader in new.isr
        assert new.leader in live
        if new.leader != current.leader:
            assert new.leader not in shutting
    if new.leader != current.leader:
        assert new.leader_epoch == current.leader_epoch + 1
        if new.leader >= 0 and change.reason != UNCLEAN:
            assert new.leader in current.isr  # clean: from the ISR only
    else:
        assert new.leader_epoch == current.leader_epoch
    if change.reason == UNCLEAN:
        assert unclean and new.isr == (new.leader,)
        assert not [r for r in current.isr if r in live and r not in shutting]
    else:
        assert set(new.isr) <= set(current.isr) and new.isr
    # one pass settles it: the next pass on the same fleet changes nothing
    assert decide(new, replicas, live, shutting, unclean) is None


# preferred leaders -------------------------------------------------------------------------

def test_the_preferred_replica_leads_again_when_eligible():
    outcome, change = elect_preferred(state(201, 4, [101, 201]), (101, 201),
                                      eligible={101, 201}, controller_epoch=C)
    assert outcome == ELECTED and change.reason == PREFERRED
    assert change.state == PartitionState(101, 5, (101, 201), C)
    assert elect_preferred(state(101, 4, [101]), (101, 201), eligible={101, 201},
                           controller_epoch=C) == (ALREADY, None)
    for eligible, isr in (({201}, [101, 201]), ({101, 201}, [201])):
        assert elect_preferred(state(201, 4, isr), (101, 201), eligible=eligible,
                               controller_epoch=C) == (NOT_AVAILABLE, None)


def test_why_the_preferred_replica_cannot_lead_is_said():
    current = state(201, 4, [201])
    assert "not live" in why_not_preferred(current, (101, 201), live={201}, shutting=set())
    assert "shutting down" in why_not_preferred(current, (101, 201), live={101, 201},
                                                shutting={101})
    assert "not in the ISR" in why_not_preferred(current, (101, 201), live={101, 201},
                                                 shutting=set())


def test_kafkas_imbalance_rule_is_per_node_and_strictly_above_the_percentage():
    # node 101 is preferred for ten partitions; one led elsewhere is 10 %: not above 10
    ten = {("t", p): ((101, 201), 101) for p in range(10)}
    ten[("t", 0)] = ((101, 201), 201)
    assert imbalanced(ten, 10) == []
    ten[("t", 1)] = ((101, 201), 201)
    assert sorted(imbalanced(ten, 10)) == [("t", 0), ("t", 1)]
    assert imbalanced(ten, 20) == []
    # node 201's single partition led elsewhere is 100 %, whatever 101 looks like
    assert imbalanced({"a": ((201, 101), 101), "b": ((101, 201), 101)}, 10) == ["a"]
    assert imbalanced({"a": ((201, 101), 201)}, 0) == []


@settings(derandomize=True, max_examples=200, deadline=None)
@given(layout=st.dictionaries(st.integers(0, 40), st.tuples(
    st.lists(nodes, min_size=1, max_size=3, unique=True), nodes), min_size=1),
    percentage=st.integers(0, 100))
def test_imbalanced_partitions_belong_to_nodes_over_the_ratio(layout, percentage):
    partitions = {k: (tuple(r), leader) for k, (r, leader) in layout.items()}
    chosen = imbalanced(partitions, percentage)
    for node in {r[0] for r, _ in partitions.values()}:
        mine = [k for k, (r, _) in partitions.items() if r[0] == node]
        elsewhere = [k for k in mine if partitions[k][1] != node]
        over = len(elsewhere) / len(mine) > percentage / 100
        assert (set(elsewhere) <= set(chosen)) if over else not (set(mine) & set(chosen))


# controlled shutdown, the leaving side ------------------------------------------------------

def test_pending_until_the_controller_moved_leaders_and_shrank_isrs():
    ours = {100, 101}
    before = [("led", state(100, 3, [100, 200, 300]), (100, 200, 300)),
              ("followed", state(200, 3, [100, 200, 300]), (200, 100, 300)),
              ("alone", state(101, 3, [101]), (101, 201)),
              ("elsewhere", state(200, 3, [200, 300]), (200, 300))]
    live = {100, 101, 200, 201, 300}
    assert shutdown_pending(before, ours=ours, live=live, shutting=set()) == ["led", "followed"]
    after = [(k, decide(s, r, live, ours).state if decide(s, r, live, ours) else s, r)
             for k, s, r in before]
    assert dict((k, s.leader) for k, s, _ in after) == {
        "led": 200, "followed": 200, "alone": 101, "elsewhere": 200}
    assert shutdown_pending(after, ours=ours, live=live, shutting=set()) == []


@settings(derandomize=True, max_examples=300, deadline=None)
@given(case=partitions(), leaving=st.sampled_from([1, 2, 3]))
def test_one_controller_pass_leaves_nothing_pending(case, leaving):
    replicas, current, live, others = case
    ours = nodes_of([leaving], ALL_NODES)
    change = decide(current, replicas, live, others | ours)
    after = change.state if change else current
    assert shutdown_pending([("p", after, replicas)], ours=ours, live=live,
                            shutting=others) == []
    if after.leader in ours:  # still led by a leaving node: nobody else in sync could take it
        assert not [r for r in after.isr if r in live - others - ours]
    assert not ours & set(after.isr) - {after.leader} or after.leader not in live


def test_unclean_election_is_the_topic_override_else_the_broker_default():
    assert unclean_enabled({}, False) is False and unclean_enabled({}, True) is True
    assert unclean_enabled({"unclean.leader.election.enable": "true"}, False) is True
    assert unclean_enabled({"unclean.leader.election.enable": " FALSE "}, True) is False
    assert unclean_enabled({"unclean.leader.election.enable": "maybe"}, True) is True


def test_a_pass_logs_its_first_decisions_and_counts_the_rest(caplog):
    """After an appliance's death the controller decides for thousands of partitions: the
    first LOGGED_DECISIONS are logged one by one at INFO, the rest at DEBUG, and a line at
    INFO counts them by reason."""
    decisions = controller.Decisions()
    extra = 10
    with caplog.at_level(logging.DEBUG, logger="cluster.controller"):
        for i in range(controller.LOGGED_DECISIONS + extra):
            reason = LEADER_GONE if i % 2 else ISR_SHRINK
            decisions.log("t-%d: decided", i, reason=reason)
        decisions.summarize()
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [m for level, m in lines if level == logging.INFO][:controller.LOGGED_DECISIONS] \
        == [f"t-{i}: decided" for i in range(controller.LOGGED_DECISIONS)]
    assert [m for level, m in lines if level == logging.DEBUG] == \
        [f"t-{i}: decided" for i in range(controller.LOGGED_DECISIONS,
                                          controller.LOGGED_DECISIONS + extra)]
    summary = lines[-1][1]
    total = controller.LOGGED_DECISIONS + extra
    assert f"{total} partition decisions" in summary
    assert f"{total // 2} {LEADER_GONE}" in summary and f"{total // 2} {ISR_SHRINK}" in summary
