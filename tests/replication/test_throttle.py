"""The follower's replication throttle: Kafka's `partition:node` lists, and a token bucket whose
bytes over any stretch of time stay within the rate (plus what it holds, and one batch)."""

from __future__ import annotations

import pytest

from appliance.workers.replication.throttle import (
    BURST_S,
    TokenBucket,
    throttled_partitions,
)


def test_kafkas_replica_lists_name_the_partitions_of_one_node():
    assert throttled_partitions("0:101,1:201, 2:101", 101) == {0, 2}
    assert throttled_partitions("0:101", 201) == frozenset()
    assert throttled_partitions("", 101) == frozenset()
    assert throttled_partitions(" * ", 101) is None  # every replica
    for bad in ("0", "x:101", "0:y", "0-101"):
        with pytest.raises(ValueError, match="is not partition:node"):
            throttled_partitions(bad, 101)


def test_the_bucket_starts_empty_and_allows_half_its_capacity_at_a_time():
    bucket = TokenBucket(1000, now=0.0)
    assert bucket.available(0.0) == 0
    assert bucket.delay_s(0.0) == pytest.approx(1000 * BURST_S / 2 / 1000)
    assert bucket.available(0.1) == 0  # 100 bytes: less than half of 250
    assert bucket.available(0.2) == 200
    assert bucket.available(60.0) == 250  # it holds at most BURST_S of the rate


def test_a_debt_is_paid_back_before_anything_more_is_allowed():
    bucket = TokenBucket(1000, now=0.0)
    assert bucket.available(0.2) == 200
    bucket.spend(5000, 0.2)  # the leader's whole batch, larger than what was allowed
    assert bucket.available(2.0) == 0
    assert bucket.available(5.1) == 0  # 100 bytes: less than half the capacity
    assert bucket.available(5.2) == 200


def test_bytes_over_time_stay_within_the_rate():
    """A follower that asks for what the bucket allows and always gets one whole batch of
    up to 700 bytes more: over 60 simulated seconds it copies at most rate * t + capacity +
    one batch, and not much less."""
    rate, batch, now, copied = 10_000, 700, 0.0, 0
    bucket = TokenBucket(rate, now=now)
    while now < 60:
        allowed = bucket.available(now)
        if allowed:
            got = allowed + batch  # the leader's whole last batch past the limit
            bucket.spend(got, now)
            copied += got
            assert copied <= rate * now + rate * BURST_S + batch
        now += bucket.delay_s(now) if not allowed else 0.001
    assert copied >= rate * 60 * 0.95


def test_the_rate_is_the_nodes_own_else_every_brokers_default():
    """AlterConfigs may set the rate for one broker (`/config/brokers/<id>`) or for all
    (`/config/brokers/<default>`, issue 25): the node's own wins, as in Kafka."""
    from types import SimpleNamespace

    from appliance.workers.replication.throttle import FOLLOWER_RATE, FollowerThrottle

    control = SimpleNamespace(fleet_node_configs={}, dynamic_configs={})
    throttle = FollowerThrottle(control, 7, in_sync=lambda key: False)
    assert throttle.rate() is None
    control.dynamic_configs = {"brokers": {"<default>": {FOLLOWER_RATE: "1000"}}}
    assert throttle.rate() == 1000
    control.fleet_node_configs = {7: {FOLLOWER_RATE: "5000"}, 8: {FOLLOWER_RATE: "1"}}
    assert throttle.rate() == 5000
