"""AlterClientQuotas and DescribeClientQuotas against a real appliance of two workers: Kafka's
answers to good and bad input, nothing changed by a refused entry or by validate_only, every
worker sees a change, and it survives a restart. (No released client has an admin call for
these APIs yet: librdkafka has none, kafka-python only the protocol classes; klog.Admin sends
them.)"""

from __future__ import annotations

import pytest

from klog.admin import Admin
from klog.protocol.apis import alter_client_quotas as alter
from klog.protocol.apis import describe_client_quotas as describe
from klog.protocol.error_codes import ErrorCode
from tests.conftest import running_appliance
from tests.polling import wait_until


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("quotas_api"), log_dirs=2) as started:
        yield started


def _entry(pairs, ops):
    return alter.RequestEntry(
        entity=[alter.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
        ops=[alter.OpData(key=k, value=float(v if v is not None else 0), remove=v is None)
             for k, v in ops])


def _alter(bootstrap, entries, validate_only=False):
    with Admin(bootstrap) as admin:
        answer = admin.request(alter, entries=entries, validate_only=validate_only)
    return [(r.error_code, r.error_message) for r in answer.entries]


def _describe(bootstrap, components=(), strict=False):
    with Admin(bootstrap) as admin:
        answer = admin.request(describe, components=[
            describe.ComponentData(entity_type=t, match_type=m, match=n)
            for t, m, n in components], strict=strict)
    if answer.error_code:
        return answer.error_code
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in answer.entries}


def _on_worker(appliance, index):
    host, port = appliance.bootstrap.split(":")
    return f"{host}:{int(port) + index}"


def test_alter_describe_and_every_worker_sees_it(appliance):
    b = appliance.bootstrap
    assert _alter(b, [
        _entry([("client-id", "fast")], [("producer_byte_rate", 1_048_576)]),
        _entry([("user", "alice"), ("client-id", None)],
               [("consumer_byte_rate", 2048), ("request_percentage", 12.5)]),
        _entry([("client-id", None)], [("producer_byte_rate", 10_000_000)]),
    ]) == [(0, None)] * 3
    expected = {
        (("client-id", "fast"),): {"producer_byte_rate": 1_048_576.0},
        (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 2048.0,
                                                   "request_percentage": 12.5},
        (("client-id", None),): {"producer_byte_rate": 10_000_000.0},
    }
    got = _describe(b)
    assert {tuple(sorted(k)): v for k, v in got.items()} == expected
    # the other worker (its own port) answers the same
    other = wait_until(lambda: _describe(_on_worker(appliance, 1)) or None, 5,
                       "the second worker to see the quotas")
    assert {tuple(sorted(k)): v for k, v in other.items()} == expected
    # match types: exact, default, any; strict leaves out entities with other types
    assert list(_describe(b, [("client-id", 0, "fast")], strict=True)) == [
        (("client-id", "fast"),)]
    assert list(_describe(b, [("client-id", 1, None)], strict=True)) == [
        (("client-id", None),)]
    assert len(_describe(b, [("client-id", 1, None)])) == 2  # alice's default client too
    assert list(_describe(b, [("user", 2, None)])) == [
        (("client-id", None), ("user", "alice"))]
    # remove one value, then the last: the entity is gone
    assert _alter(b, [_entry([("client-id", "fast")], [("producer_byte_rate", None)])]) == [
        (0, None)]
    assert (("client-id", "fast"),) not in _describe(b)


def test_bad_input_changes_nothing(appliance):
    b = appliance.bootstrap
    before = _describe(b)
    answers = _alter(b, [
        _entry([("client-id", "x")], [("producer_byte_rate", -1)]),
        _entry([("client-id", "x")], [("no_such_quota", 5)]),
        _entry([("group", "x")], [("producer_byte_rate", 5)]),
        _entry([], [("producer_byte_rate", 5)]),
        _entry([("user", "u"), ("user", "v")], [("producer_byte_rate", 5)]),
        _entry([("client-id", "x")], [("producer_byte_rate", 1.5)]),
    ])
    assert [code for code, _ in answers] == [ErrorCode.INVALID_REQUEST] * 6
    assert all(message for _, message in answers)
    assert _describe(b) == before
    # one bad entry beside a good one: the good one is stored, the bad one changes nothing
    assert [c for c, _ in _alter(b, [
        _entry([("client-id", "good")], [("consumer_byte_rate", 100)]),
        _entry([("client-id", "bad")], [("consumer_byte_rate", -100)]),
    ])] == [0, ErrorCode.INVALID_REQUEST]
    after = _describe(b)
    assert after[(("client-id", "good"),)] == {"consumer_byte_rate": 100.0}
    assert (("client-id", "bad"),) not in after
    # validate_only: answered, not stored
    assert _alter(b, [_entry([("client-id", "dry")], [("producer_byte_rate", 5)])],
                  validate_only=True) == [(0, None)]
    assert (("client-id", "dry"),) not in _describe(b)
    # bad filters
    assert _describe(b, [("group", 0, "x")]) == ErrorCode.INVALID_REQUEST
    assert _describe(b, [("user", 7, None)]) == ErrorCode.INVALID_REQUEST
    assert _describe(b, [("user", 2, None), ("user", 1, None)]) == ErrorCode.INVALID_REQUEST


def test_quotas_survive_a_restart(appliance):
    b = appliance.bootstrap
    assert _alter(b, [_entry([("user", None)], [("request_percentage", 200)])]) == [(0, None)]
    appliance.stop()
    appliance.start()
    assert _describe(b, [("user", 1, None)], strict=True) == {
        (("user", None),): {"request_percentage": 200.0}}


def test_request_percentage_throttles_by_handler_time(appliance):
    """users/<default>/clients/busy: a tiny request_percentage, reached by the time the worker
    spends on one client's Metadata requests; the answer carries the throttle time. Another
    client id is not throttled."""
    from klog.protocol.apis import metadata

    b = appliance.bootstrap
    assert _alter(b, [_entry([("user", None), ("client-id", "busy")],
                             [("request_percentage", 0.001)])]) == [(0, None)]
    throttled = 0
    with Admin(b, client_id="busy") as admin:
        for _ in range(2000):
            answer = admin.request(metadata, topics=None, allow_auto_topic_creation=False)
            if answer.throttle_time_ms > 0:
                throttled = answer.throttle_time_ms
                break
    assert 0 < throttled <= 1000
    with Admin(b, client_id="idle") as admin:
        assert admin.request(metadata, topics=None,
                             allow_auto_topic_creation=False).throttle_time_ms == 0
    assert _alter(b, [_entry([("user", None), ("client-id", "busy")],
                             [("request_percentage", None)])]) == [(0, None)]
