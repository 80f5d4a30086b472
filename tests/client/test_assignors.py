"""The assignors without a broker: Kafka's documented examples, edge cases, and properties
of cooperative-sticky."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.consumer.assignors import ASSIGNORS, Member, rebalance_protocol
from klog.types import TopicPartition
from tests.client.fakes import tps

TP = TopicPartition


def member(member_id, *topics, owned=(), generation=-1, instance=None) -> Member:
    return Member(member_id, frozenset(topics), tuple(owned), generation, instance)


def run(name, members, counts):
    return {m: sorted(p) for m, p in ASSIGNORS[name].assign(members, counts).items()}


def test_range_kafka_example():
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    assert run("range", members, {"t0": 3, "t1": 3}) == {
        "C0": sorted(tps("t0p0 t0p1 t1p0 t1p1")), "C1": sorted(tps("t0p2 t1p2"))}


def test_roundrobin_kafka_examples():
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    assert run("roundrobin", members, {"t0": 3, "t1": 3}) == {
        "C0": sorted(tps("t0p0 t0p2 t1p1")), "C1": sorted(tps("t0p1 t1p0 t1p2"))}
    members = [member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")]
    assert run("roundrobin", members, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": tps("t0p0"), "C1": tps("t1p0"), "C2": sorted(tps("t1p1 t2p0 t2p1 t2p2"))}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_more_members_than_partitions(name):
    members = [member(f"m{i}", "t") for i in range(4)]
    result = run(name, members, {"t": 2})
    assert sorted(tp for got in result.values() for tp in got) == tps("tp0 tp1")
    assert sorted(len(got) for got in result.values()) == [0, 0, 1, 1]


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_unknown_topics_and_different_subscriptions(name):
    members = [member("a", "t", "ghost"), member("b", "u")]
    result = run(name, members, {"t": 2, "u": 1})
    assert result == {"a": tps("tp0 tp1"), "b": tps("up0")}


def test_static_members_come_first_in_java_order():
    members = [member("a-dynamic", "t"), member("z-static", "t", instance="i1")]
    assert run("range", members, {"t": 3}) == {"z-static": tps("tp0 tp1"),
                                               "a-dynamic": tps("tp2")}


def test_the_rebalance_protocol_is_cooperative_only_when_every_assignor_is():
    assert rebalance_protocol(["cooperative-sticky"]) == "cooperative"
    assert rebalance_protocol(["range", "cooperative-sticky"]) == "eager"
    assert rebalance_protocol(["range", "roundrobin"]) == "eager"


def test_sticky_kafka_example_keeps_what_survivors_own():
    """Kafka's StickyAssignor javadoc: C1 leaves; C0 and C2 keep everything they had."""
    counts = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    members = [member("C0", *counts, owned=tps("t0p0 t1p1 t3p0"), generation=1),
               member("C2", *counts, owned=tps("t1p0 t2p1"), generation=1)]
    assert run("cooperative-sticky", members, counts) == {
        "C0": sorted(tps("t0p0 t1p1 t3p0 t2p0")), "C2": sorted(tps("t1p0 t2p1 t0p1 t3p1"))}


def test_cooperative_sticky_moves_in_two_rebalances():
    first = run("cooperative-sticky", [member("a", "t", owned=tps("tp0 tp1 tp2 tp3"),
                                              generation=1), member("b", "t")], {"t": 4})
    assert first == {"a": tps("tp2 tp3"), "b": []}  # b gets nothing while a still owns it
    second = run("cooperative-sticky", [member("a", "t", owned=first["a"], generation=2),
                                        member("b", "t", generation=2)], {"t": 4})
    assert second == {"a": tps("tp2 tp3"), "b": tps("tp0 tp1")}


def test_cooperative_sticky_contested_and_stale_claims():
    members = [member("a", "t", owned=tps("tp0"), generation=3),
               member("b", "t", owned=tps("tp0 tp1"), generation=3),  # both claim tp0
               member("c", "t", owned=tps("tp1"), generation=2)]  # stale claim of tp1
    result = run("cooperative-sticky", members, {"t": 3})
    assert TP("t", 0) not in {tp for got in result.values() for tp in got}
    assert TP("t", 1) in result["b"] and TP("t", 1) not in result["c"]


@st.composite
def groups(draw):
    topics = {f"t{i}": draw(st.integers(0, 5)) for i in range(draw(st.integers(1, 3)))}
    count = draw(st.integers(1, 5))
    same = draw(st.booleans())
    members = []
    for i in range(count):
        subscribed = sorted(topics) if same else draw(
            st.lists(st.sampled_from(sorted(topics)), min_size=1, unique=True))
        members.append(member(f"m{i}", *subscribed))
    return members, topics


def simulate(members, counts, rounds):
    """Rebalance repeatedly as cooperative members would, each round's owners being what
    the last round left them; returns the assignments of every round."""
    history = []
    owned = {m.member_id: list(m.owned) for m in members}
    for generation in range(1, rounds + 1):
        current = [m._replace(owned=tuple(owned[m.member_id]), generation=generation)
                   for m in members]
        result = ASSIGNORS["cooperative-sticky"].assign(current, counts)
        for m in members:
            mine = result[m.member_id]
            assert not set(mine) - set(owned[m.member_id]) & {
                tp for other, held in owned.items() if other != m.member_id for tp in held}
            owned[m.member_id] = mine
        history.append(result)
    return history


@settings(derandomize=True, max_examples=150, deadline=None)
@given(groups())
def test_cooperative_sticky_converges_to_a_balanced_valid_assignment(group):
    members, counts = group
    final = simulate(members, counts, rounds=3)[-1]
    assigned = [tp for got in final.values() for tp in got]
    assert len(assigned) == len(set(assigned))
    by_id = {m.member_id: m for m in members}
    for member_id, got in final.items():
        assert all(tp.topic in by_id[member_id].topics for tp in got)
    wanted = {TP(t, p) for m in members for t in m.topics for p in range(counts[t])}
    assert set(assigned) == wanted
    for got in final.values():  # balance: nothing could move to a 2-emptier peer
        for tp in got:
            assert all(len(final[o]) + 1 >= len(got) for o in final
                       if tp.topic in by_id[o].topics)
    if all(m.topics == members[0].topics for m in members):
        sizes = [len(got) for got in final.values()]
        assert max(sizes) - min(sizes) <= 1
