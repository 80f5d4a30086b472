"""The dynamic config store alone (a file beside the catalog) and the brokers' dynamic keys
as a worker applies them: pure and quick, no appliance."""

from __future__ import annotations

import pytest

from appliance import dynamic_broker
from appliance.config import BrokerConfig
from appliance.control.config_store import LocalConfigStore
from appliance.control.dynamic_configs import DEFAULT_ENTITY, entity


def test_the_store_keeps_entities_across_a_restart(tmp_path):
    store = LocalConfigStore(tmp_path)
    store.alter("users", "alice", {"producer_byte_rate": "1024"})
    store.alter("users/alice/clients", DEFAULT_ENTITY, {"consumer_byte_rate": "2048"})
    store.alter("brokers", DEFAULT_ENTITY, {"log.retention.ms": "1000"})
    store.alter("users", "alice", {"request_percentage": "50", "producer_byte_rate": None})
    again = LocalConfigStore(tmp_path)
    assert entity(again.entities(), "users", "alice") == {"request_percentage": "50"}
    assert entity(again.entities(), "users/alice/clients", DEFAULT_ENTITY) == {
        "consumer_byte_rate": "2048"}
    again.alter("users", "alice", {"request_percentage": None})
    assert "users" not in LocalConfigStore(tmp_path).entities()  # emptied entities go


def test_the_store_refuses_an_unknown_entity_type(tmp_path):
    with pytest.raises(ValueError, match="entity type"):
        LocalConfigStore(tmp_path).alter("groups", "g", {"x": "1"})


def test_layers_win_in_kafkas_order():
    base = BrokerConfig()
    config = dynamic_broker.effective(base, [
        {"log.retention.ms": "1000", "log.cleaner.backoff.ms": "5"},
        {"log.retention.ms": "2000"}])
    assert config.log_defaults.retention_ms == 2000
    assert config.log_cleaner_backoff_ms == 5
    assert dynamic_broker.effective(base, [{}, {}]) is base
    # Kafka's finer unit wins whatever the layer: ms over hours
    both = dynamic_broker.effective(base, [{"log.retention.ms": "7"},
                                           {"log.retention.hours": "1"}])
    assert both.log_defaults.retention_ms == 7


@pytest.mark.parametrize("settings, named", [
    ({"broker.id": "1"}, "broker.id"), ({"no.such.key": "1"}, "no.such.key"),
    ({"log.retention.ms": "x"}, "log.retention.ms"),
    ({"log.segment.bytes": "3"}, "segment.bytes"),
    ({"leader.replication.throttled.rate": "-1"}, "leader.replication.throttled.rate"),
    ({"log.cleanup.policy": "shrink"}, "cleanup")])
def test_check_names_the_key(settings, named):
    problem = dynamic_broker.check(settings, BrokerConfig())
    assert problem is not None and named in problem


def test_throttle_rates_are_kept_not_applied_to_the_config():
    assert dynamic_broker.check({"follower.replication.throttled.rate": "1048576"},
                                BrokerConfig()) is None


def test_the_cleaner_takes_its_new_rate_and_buffers():
    from types import SimpleNamespace

    from appliance.segments.cleaner import CleanerSettings
    from appliance.workers.cleaner_throttle import Throttler
    from appliance.workers.dynamic_settings import _apply_cleaner

    cleaner = SimpleNamespace(threads=2, backoff_s=15.0,
                              settings=CleanerSettings(throttle=Throttler(float("inf"))))
    config = dynamic_broker.effective(BrokerConfig(), [{
        "log.cleaner.io.max.bytes.per.second": "1048576", "log.cleaner.backoff.ms": "250",
        "log.cleaner.dedupe.buffer.size": "4194304"}])
    _apply_cleaner(cleaner, config)
    assert cleaner.settings.throttle.rate == 1048576
    assert cleaner.backoff_s == 0.25
    assert cleaner.settings.dedupe_buffer_bytes == 2097152  # shared by the two threads
