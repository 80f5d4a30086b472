"""Placement is a pure function; the catalog persists topics atomically."""

from __future__ import annotations

from appliance.control.catalog import Catalog, ProducerIdBlocks
from appliance.control.placement import place_partitions
from appliance.control.topics import TopicInfo


def test_placement_spreads_round_robin_from_the_least_loaded():
    assert place_partitions(4, {0: 0, 1: 0}) == (0, 1, 0, 1)
    assert place_partitions(3, {0: 5, 1: 1, 2: 1}) == (1, 2, 1)
    assert place_partitions(1, {0: 0}) == (0,)


def test_catalog_survives_reopen_and_skips_garbage(tmp_path):
    catalog = Catalog(tmp_path)
    catalog.put(TopicInfo("clicks", (0, 1, 0), {"retention.ms": "1000"}))
    (catalog.root / "broken.json").write_text("{not json")
    again = Catalog(tmp_path)
    assert again.get("clicks") == TopicInfo("clicks", (0, 1, 0), {"retention.ms": "1000"})
    assert len(again.problems) == 1 and "broken.json" in again.problems[0]
    again.remove("clicks")
    assert Catalog(tmp_path).get("clicks") is None


def test_producer_ids_never_repeat_across_restarts(tmp_path):
    Catalog(tmp_path)
    first = ProducerIdBlocks(tmp_path)
    ids = [first.allocate() for _ in range(5)]
    second = ProducerIdBlocks(tmp_path)
    assert second.allocate() > max(ids)
