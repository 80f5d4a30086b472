"""The quota rules without an appliance: KIP-55's precedence of entities and the tags of the
sensor a client shares, and Kafka's sampled rate and throttle time."""

from __future__ import annotations

from appliance.client_quotas.entities import entity, resolve
from appliance.client_quotas.rate import SampledRate

P = "producer_byte_rate"


def _q(*rows):
    return {entity(pairs): {P: value} for pairs, value in rows}


def test_precedence_most_specific_first():
    quotas = _q(
        ([("client-id", None)], 1.0),
        ([("client-id", "c")], 2.0),
        ([("user", None)], 3.0),
        ([("user", None), ("client-id", None)], 4.0),
        ([("user", None), ("client-id", "c")], 5.0),
        ([("user", "u")], 6.0),
        ([("user", "u"), ("client-id", None)], 7.0),
        ([("user", "u"), ("client-id", "c")], 8.0),
    )
    order = list(quotas)[::-1]  # remove the most specific one by one
    expected = [(8.0, ("u", "c")), (7.0, ("u", "c")), (6.0, ("u", "")), (5.0, ("u", "c")),
                (4.0, ("u", "c")), (3.0, ("u", "")), (2.0, ("", "c")), (1.0, ("", "c"))]
    for ent, want in zip(order, expected, strict=True):
        assert resolve(quotas, "u", "c", P) == want
        del quotas[ent]
    assert resolve(quotas, "u", "c", P) is None


def test_a_key_resolves_on_its_own():
    quotas = {entity([("user", "u")]): {"consumer_byte_rate": 9.0},
              entity([("client-id", "c")]): {P: 1.0}}
    assert resolve(quotas, "u", "c", P) == (1.0, ("", "c"))
    assert resolve(quotas, "u", "c", "consumer_byte_rate") == (9.0, ("u", ""))
    assert resolve(quotas, "other", "d", P) is None


def test_rate_and_throttle_time_as_kafka():
    rate = SampledRate(11, 1000)
    rate.record(5000, 0)
    # one sample: measured over num - 1 windows (10 s)
    assert rate.measure(0) == 500.0
    assert rate.throttle_ms(1000, 0) == 0
    rate.record(10_000, 100)
    # 100 ms since the oldest sample, plus 10 whole windows of padding
    measured = 15_000 * 1000 / 10_100
    assert rate.measure(100) == measured
    # (1485 - 1000) / 1000 * 10.1 s = 4.9 s, bounded to one window
    assert rate.throttle_ms(1000, 100) == 1000
    assert rate.throttle_ms(1400, 100) == round((measured - 1400) / 1400 * 10_100)
    # after all the windows, the samples are gone
    assert rate.measure(11_100) == 0.0
