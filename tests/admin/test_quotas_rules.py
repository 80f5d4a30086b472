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


class _Store:
    def __init__(self, quotas):
        self._quotas = quotas
        self.version = 1

    def quotas(self):
        return self._quotas

    def refresh(self, now_s):
        pass


class _Clock:
    now = 100.0

    def __call__(self):
        return self.now


def _produce(client_id, principal, nbytes, acks=1):
    from types import SimpleNamespace as NS

    body = NS(acks=acks, topic_data=[NS(partition_data=[NS(records=b"x" * nbytes)])])
    return NS(header=NS(api_key=0, api_version=8, client_id=client_id), body=body,
              principal=principal)


def _fetch(client_id, replica_id=-1):
    from types import SimpleNamespace as NS

    return NS(header=NS(api_key=1, api_version=11, client_id=client_id),
              body=NS(replica_id=replica_id, max_bytes=50_000_000), principal="User:ANONYMOUS")


def _fetch_answer(nbytes):
    from klog.protocol.apis import fetch

    return fetch.Response(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        fetch.FetchableTopicResponse(topic="t", partitions=[fetch.PartitionData(
            partition_index=0, error_code=0, high_watermark=0, last_stable_offset=0,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
            records=b"x" * nbytes)])])


def test_the_enforcer_throttles_users_and_exempts_replicas():
    from appliance.workers.client_quotas import QuotaEnforcer
    from klog.protocol.apis import produce

    quotas = {entity([("user", "alice")]): {P: 1000.0},
              entity([("client-id", "reader")]): {"consumer_byte_rate": 1000.0}}
    clock = _Clock()
    enforcer = QuotaEnforcer(_Store(quotas), clock=clock)
    assert enforcer.active
    answer = produce.Response(responses=[], throttle_time_ms=0)
    # alice (a SASL user) shares one rate whatever her client id; 10 s of quota pass first
    assert enforcer.after(_produce("a", "User:alice", 10_000), answer, 0)[1] == 0
    result, ms = enforcer.after(_produce("b", "User:alice", 5_000), answer, 0)
    assert ms == 1000 and result.throttle_time_ms == 1000
    assert enforcer.after(_produce("a", "User:bob", 100_000), answer, 0)[1] == 0
    # a consumer over its quota gets an empty answer; its bytes are taken back out
    request = _fetch("reader")
    enforcer.before(request)
    assert request.body.max_bytes == 10_000  # the quota's 10 windows
    assert enforcer.after(request, _fetch_answer(9_000), 0)[1] == 0
    empty, ms = enforcer.after(_fetch("reader"), _fetch_answer(9_000), 0)
    assert ms > 0 and empty.responses == [] and empty.throttle_time_ms == ms
    # a follower's fetch under the same client id is exempt
    assert enforcer.after(_fetch("reader", replica_id=2), _fetch_answer(9_000), 0)[1] == 0
    kinds = {(k, u, c) for k, u, c, _, _ in enforcer.document()}
    assert kinds == {("produce", "alice", "b"), ("fetch", "ANONYMOUS", "reader")}
