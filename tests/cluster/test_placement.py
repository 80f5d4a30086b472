"""Replica placement and leader election: pure decisions, checked as properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.placement import LiveNode, PlacementError, appliance_of, elect_leader, place_replicas


def fleet(appliances: int, workers: int, racks: int = 0) -> list[LiveNode]:
    return [LiveNode(a * 100 + w, f"rack-{a % racks}" if racks else None)
            for a in range(1, appliances + 1) for w in range(workers)]


@settings(derandomize=True, max_examples=200, deadline=None)
@given(appliances=st.integers(1, 6), workers=st.integers(1, 4), racks=st.integers(0, 3),
       partitions=st.integers(1, 40), data=st.data())
def test_replicas_sit_on_distinct_appliances_and_spread_evenly(appliances, workers, racks,
                                                              partitions, data):
    rf = data.draw(st.integers(1, appliances))
    placed = place_replicas(range(partitions), rf, fleet(appliances, workers, racks), {})
    assert sorted(placed) == list(range(partitions))
    per_node: dict[int, int] = {}
    for replicas in placed.values():
        assert len(replicas) == rf
        assert len({appliance_of(r) for r in replicas}) == rf
        for r in replicas:
            per_node[r] = per_node.get(r, 0) + 1
    leaders = [replicas[0] for replicas in placed.values()]
    per_appliance = [sum(1 for x in leaders if appliance_of(x) == a)
                     for a in range(1, appliances + 1)]
    assert max(per_appliance) - min(per_appliance) <= 1  # leaders rotate over appliances
    loads = [per_node.get(n.node_id, 0) for n in fleet(appliances, workers)]
    if partitions * rf >= appliances * workers:
        assert max(loads) - min(loads) <= max(2, rf)


def test_racks_are_spread_before_appliances_repeat_a_rack():
    nodes = [LiveNode(100, "a"), LiveNode(200, "a"), LiveNode(300, "b"), LiveNode(400, "b")]
    for replicas in place_replicas(range(8), 2, nodes, {}).values():
        assert {n.rack for n in nodes if n.node_id in replicas} == {"a", "b"}


def test_the_least_loaded_disk_of_an_appliance_takes_the_replica():
    nodes = [LiveNode(100), LiveNode(101), LiveNode(102)]
    assert place_replicas([0, 1], 1, nodes, {100: 5, 101: 1, 102: 3}) == {0: (101,), 1: (101,)}


def test_more_replicas_than_appliances_is_refused_naming_both():
    with pytest.raises(PlacementError, match="3 is larger than the 2 live"):
        place_replicas([0], 3, fleet(2, 3), {})


def test_leaders_come_from_the_isr_only_in_assignment_order():
    assert elect_leader([101, 201, 301], [201, 301], {101, 201, 301}) == 201
    assert elect_leader([101, 201, 301], [301, 201], {201, 301}) == 201
    assert elect_leader([101, 201], [101], {201}) == -1  # no unclean election
