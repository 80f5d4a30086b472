"""server.properties parsing and the typed config: Kafka's format, Kafka's keys, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import ConfigError, Listener, build_config, load_config
from appliance.properties import PropertiesError, parse_properties


def test_java_properties_format():
    text = (
        "# comment\n! also a comment\n"
        "a=1\nb : 2\nc 3\n"
        "d=one,\\\n   two\n"
        "e=tab\\there\\u0041\n"
        "  f = spaced  \n"
        "a=overridden\n"
    )
    assert parse_properties(text) == {
        "a": "overridden", "b": "2", "c": "3", "d": "one,two", "e": "tab\thereA",
        "f": "spaced",
    }


def test_bad_unicode_escape_names_the_line():
    with pytest.raises(PropertiesError, match=r"x\.properties:2"):
        parse_properties("a=1\nb=\\u12\n", source="x.properties")


def test_kafka_keys_map_to_typed_fields(tmp_path: Path):
    config = build_config({
        "broker.id": "3",
        "listeners": "PLAINTEXT://127.0.0.1:19092",
        "log.dirs": f"{tmp_path}/a,{tmp_path}/b",
        "num.partitions": "6",
        "log.segment.bytes": "1048576",
        "log.retention.hours": "2",
        "log.retention.bytes": "1000000",
        "flush.messages": "1",
        "auto.create.topics.enable": "false",
        "num.network.threads": "8",
    })
    assert config.broker_id == 3
    assert config.listeners == (Listener("127.0.0.1", 19092),)
    assert config.log_dirs == (tmp_path / "a", tmp_path / "b")
    assert config.num_partitions == 6
    assert config.log_defaults.segment_bytes == 1048576
    assert config.log_defaults.retention_ms == 2 * 3_600_000
    assert config.log_defaults.retention_bytes == 1_000_000
    assert config.log_defaults.flush_messages == 1
    assert config.auto_create_topics_enable is False
    assert config.ignored_keys == ("num.network.threads",)


def test_finer_retention_unit_wins_whatever_the_order():
    config = build_config({"log.retention.ms": "5000", "log.retention.hours": "1"})
    assert config.log_defaults.retention_ms == 5000


@pytest.mark.parametrize("settings, key", [
    ({"log.segmnet.bytes": "1"}, "log.segmnet.bytes"),
    ({"num.partitions": "zero"}, "num.partitions"),
    ({"num.partitions": "0"}, "num.partitions"),
    ({"listeners": "SSL://h:1"}, "ssl.keystore.location"),  # an SSL listener needs a key
    ({"listeners": "CLIENT://h:1"}, "listeners"),  # a name the protocol map does not have
    ({"listeners": "CLIENT://h:1", "listener.security.protocol.map": "CLIENT:SASL_SSL"},
     "ssl.keystore.location"),  # SASL_SSL is TLS first: it needs a key too
    ({"listeners": "SASL_SSL://h:1", "ssl.keystore.location": "/k.pem"},
     "sasl.enabled.mechanisms"),  # ... and SASL's mechanisms
    ({"listener.security.protocol.map": "CLIENT:TLS"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "CLIENT"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://h:notaport"}, "listeners"),
    ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
    ({"log.segment.bytes": "1"}, "segment.bytes"),
    ({"offsets.topic.num.partitions": "0"}, "offsets.topic.num.partitions"),
    ({"offsets.topic.segment.bytes": "100"}, "offsets.topic.segment.bytes"),
    ({"offsets.topic.replication.factor": "0"}, "offsets.topic.replication.factor"),
    ({"offsets.commit.timeout.ms": "soon"}, "offsets.commit.timeout.ms"),
    ({"group.min.session.timeout.ms": "9000", "group.max.session.timeout.ms": "8000"},
     "group.min.session.timeout.ms"),
    ({"connections.max.idle.ms": "0"}, "connections.max.idle.ms"),
    ({"max.connections": "none"}, "max.connections"),
    ({"max.connections.per.ip": "0"}, "max.connections.per.ip"),
    ({"metrics.port": "70000"}, "metrics.port"),
    ({"metrics.port": "0"}, "metrics.port"),
    ({"unclean.leader.election.enable": "1"}, "unclean.leader.election.enable"),
    ({"controlled.shutdown.enable": "maybe"}, "controlled.shutdown.enable"),
    ({"controlled.shutdown.max.retries": "-1"}, "controlled.shutdown.max.retries"),
    ({"controlled.shutdown.retry.backoff.ms": "soon"}, "controlled.shutdown.retry.backoff.ms"),
    ({"auto.leader.rebalance.enable": "on"}, "auto.leader.rebalance.enable"),
    ({"leader.imbalance.check.interval.seconds": "0"}, "leader.imbalance.check.interval.seconds"),
    ({"leader.imbalance.per.broker.percentage": "101"}, "leader.imbalance.per.broker.percentage"),
])
def test_bad_settings_name_the_key(settings, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config(settings)


def test_protection_and_metrics_keys():
    default = build_config({})
    assert default.connections_max_idle_ms == 600_000  # Kafka's defaults
    assert default.max_connections == default.max_connections_per_ip == 2**31 - 1
    assert default.metrics_port is None  # metrics off unless asked for
    config = build_config({"connections.max.idle.ms": "1500", "max.connections": "60",
                           "max.connections.per.ip": "25", "metrics.port": "9100",
                           "metrics.host": "0.0.0.0"})
    assert (config.connections_max_idle_ms, config.max_connections,
            config.max_connections_per_ip) == (1500, 60, 25)
    assert (config.metrics_host, config.metrics_port) == ("0.0.0.0", 9100)


def test_the_offsets_topic_keys_are_kafkas():
    default = build_config({})
    assert (default.offsets_topic_replication_factor, default.offsets_commit_timeout_ms) == \
        (3, 5000)  # Kafka's defaults, no longer ignored
    config = build_config({"offsets.topic.replication.factor": "2",
                           "offsets.commit.timeout.ms": "800"})
    assert (config.offsets_topic_replication_factor, config.offsets_commit_timeout_ms) == \
        (2, 800)
    assert config.ignored_keys == ()


def test_overrides_apply_over_the_file(tmp_path: Path):
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=2\nbroker.id=1\n")
    config = load_config(path, ["num.partitions=5"])
    assert (config.num_partitions, config.broker_id) == (5, 1)
    with pytest.raises(ConfigError, match="key=value"):
        load_config(path, ["novalue"])


def test_missing_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.properties")


def test_cluster_mode_keys_are_read_and_checked():
    from appliance.config import build_config
    config = build_config({"zookeeper.connect": "127.0.0.1:2181,127.0.0.2:2181/klog",
                           "zookeeper.session.timeout.ms": "6000", "broker.rack": "r1"})
    assert config.zookeeper_connect == "127.0.0.1:2181,127.0.0.2:2181/klog"
    assert config.zookeeper_session_timeout_ms == 6000
    assert config.zookeeper_connection_timeout_ms == 18_000
    assert config.broker_rack == "r1"
    for bad in ("localhost", "h:2181/", "h:2181//x", "h:99999"):
        with pytest.raises(ConfigError, match="zookeeper.connect"):
            build_config({"zookeeper.connect": bad})


def test_a_wildcard_or_unresolvable_advertised_listener_stops_a_fleet_member():
    from appliance.config import build_config
    from appliance.listener_security import check_advertised_listener
    check_advertised_listener(build_config({"listeners": "PLAINTEXT://127.0.0.1:9092"}))
    with pytest.raises(ConfigError, match="listeners.*wildcard"):
        check_advertised_listener(build_config({"listeners": "PLAINTEXT://0.0.0.0:9092"}))
    with pytest.raises(ConfigError, match="advertised.listeners.*does not resolve"):
        check_advertised_listener(build_config(
            {"advertised.listeners": "PLAINTEXT://no-such-host.invalid:9092"}))


def test_leadership_keys_have_kafkas_defaults_and_are_read():
    default = build_config({})
    assert default.controlled_shutdown_enable is True
    assert (default.controlled_shutdown_max_retries,
            default.controlled_shutdown_retry_backoff_ms) == (3, 5000)
    assert default.auto_leader_rebalance_enable is True
    assert (default.leader_imbalance_check_interval_seconds,
            default.leader_imbalance_per_broker_percentage) == (300, 10)
    assert default.log_defaults.unclean_leader_election_enable is False
    config = build_config({"controlled.shutdown.enable": "false",
                           "controlled.shutdown.max.retries": "5",
                           "controlled.shutdown.retry.backoff.ms": "200",
                           "auto.leader.rebalance.enable": "FALSE",
                           "leader.imbalance.check.interval.seconds": "2",
                           "leader.imbalance.per.broker.percentage": "0",
                           "unclean.leader.election.enable": "true"})
    assert (config.controlled_shutdown_enable, config.controlled_shutdown_max_retries,
            config.controlled_shutdown_retry_backoff_ms) == (False, 5, 200)
    assert (config.auto_leader_rebalance_enable, config.leader_imbalance_check_interval_seconds,
            config.leader_imbalance_per_broker_percentage) == (False, 2, 0)
    assert config.log_defaults.unclean_leader_election_enable is True
    assert config.ignored_keys == ()  # no longer accepted with a warning: read and checked


def test_a_listener_name_takes_its_security_protocol_from_the_map():
    config = build_config({"listeners": "client://127.0.0.1:9092",
                           "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPL:PLAINTEXT"})
    assert config.listeners == (Listener("127.0.0.1", 9092, "CLIENT", "PLAINTEXT"),)
    assert str(config.first_listener) == "CLIENT://127.0.0.1:9092"
    assert build_config({}).first_listener.security_protocol == "PLAINTEXT"
