"""Several listeners: Kafka's keys and Kafka's refusals (appliance/listeners.py,
appliance/inter_broker.py, the per-listener SASL and ssl.* keys in appliance/config.py)."""

from __future__ import annotations

import pytest

from appliance.config import ConfigError, Listener, build_config
from tests.security_tls.certs import KEY_PASSWORD, make_certs

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="broker" password="broker-secret";')
TWO = {"listeners": "CLIENT://127.0.0.1:9092,REPLICATION://10.0.0.1:9192",
       "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
       "listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512"}
FLEET = {**TWO, "zookeeper.connect": "zk:2181", "inter.broker.listener.name": "REPLICATION",
         "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
         "listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_every_listener_with_its_protocol():
    config = build_config(TWO)
    assert config.listeners == (Listener("127.0.0.1", 9092, "CLIENT", "PLAINTEXT"),
                                Listener("10.0.0.1", 9192, "REPLICATION", "SASL_PLAINTEXT"))
    assert config.first_listener.name == "CLIENT"
    assert config.sasl_for("CLIENT") is None
    assert config.sasl_for("REPLICATION").enabled_mechanisms == ("SCRAM-SHA-512",)
    # alone, with no PLAINTEXT-named listener, the first one stands for the inter-broker one
    assert config.inter_broker_listener.name == "CLIENT"


def test_the_default_configuration_is_one_plaintext_listener():
    config = build_config({})
    assert config.listeners == (Listener("127.0.0.1", 9092),)
    assert config.inter_broker_listener == config.first_listener
    assert config.advertised == config.first_listener


@pytest.mark.parametrize("listeners, message", [
    ("A://:9092,A://:9093", "Each listener must have a different name"),
    ("PLAINTEXT://:9092,SSL://:9092", "Each listener must have a different port"),
])
def test_kafkas_refusals_of_duplicates(listeners, message):
    with pytest.raises(ConfigError, match=message):
        build_config({"listeners": listeners, "listener.security.protocol.map":
                      "A:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL"})


def test_ports_of_two_listeners_may_not_overlap_across_workers(tmp_path):
    with pytest.raises(ConfigError, match="overlap.*space the ports at least 2 apart"):
        build_config({"listeners": "PLAINTEXT://:9092,OTHER://:9093",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
                      "log.dirs": f"{tmp_path}/a,{tmp_path}/b"})


def test_an_advertised_listener_names_a_configured_one():
    config = build_config({**TWO, "advertised.listeners": "REPLICATION://broker1:9192"})
    assert config.advertised_for("REPLICATION") == Listener("broker1", 9192, "REPLICATION",
                                                            "SASL_PLAINTEXT")
    assert config.advertised_for("CLIENT").host == "127.0.0.1"  # not advertised: as bound
    with pytest.raises(ConfigError, match="advertised.listeners listener names must be equal "
                                          "to or a subset of the ones defined in listeners"):
        build_config({**TWO, "advertised.listeners": "OTHER://broker1:9192",
                      "listener.security.protocol.map": "CLIENT:PLAINTEXT,"
                      "REPLICATION:SASL_PLAINTEXT,OTHER:PLAINTEXT"})


def test_advertised_listeners_may_share_a_port():
    config = build_config({**TWO, "advertised.listeners": "CLIENT://lb:9000,REPLICATION://lb:9000"})
    assert {a.port for a in config.advertised_endpoints} == {9000}


def test_inter_broker_listener_name_and_protocol_are_exclusive():
    with pytest.raises(ConfigError, match="Only one of inter.broker.listener.name and "
                                          "security.inter.broker.protocol should be set"):
        build_config({**TWO, "inter.broker.listener.name": "CLIENT",
                      "security.inter.broker.protocol": "PLAINTEXT"})


def test_security_inter_broker_protocol_names_the_listener_of_that_name():
    config = build_config({"listeners": "SASL_PLAINTEXT://:9092,PLAINTEXT://:9192",
                           "sasl.enabled.mechanisms": "SCRAM-SHA-256",
                           "security.inter.broker.protocol": "PLAINTEXT"})
    assert config.inter_broker_listener.name == "PLAINTEXT"


def test_an_unknown_inter_broker_listener_is_refused():
    with pytest.raises(ConfigError, match="inter.broker.listener.name must be a listener name "
                                          "defined in advertised.listeners"):
        build_config({**TWO, "inter.broker.listener.name": "NOPE"})
    # a fleet with the default (PLAINTEXT) and no such listener: Kafka's refusal too
    with pytest.raises(ConfigError, match="must be a listener name defined"):
        build_config({**TWO, "zookeeper.connect": "zk:2181"})


def test_a_fleet_reads_the_brokers_own_credentials():
    config = build_config(FLEET)
    assert config.inter_broker_listener.name == "REPLICATION"
    sasl = config.inter_broker_sasl
    assert (sasl.mechanism, sasl.username, sasl.password) == ("SCRAM-SHA-512", "broker",
                                                              "broker-secret")
    assert "broker-secret" not in repr(config)
    key = "listener.name.replication.scram-sha-512.sasl.jaas.config"
    assert key not in config.ignored_keys  # it is used now


@pytest.mark.parametrize("change, message", [
    ({"sasl.mechanism.inter.broker.protocol": None}, "set sasl.mechanism.inter.broker.protocol"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "GSSAPI.* is not"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "must be included in "
                                                        "sasl.enabled.mechanisms"),
    ({"listener.name.replication.scram-sha-512.sasl.jaas.config": None},
     "listener.name.replication.scram-sha-512.sasl.jaas.config"),
    ({"listener.name.replication.scram-sha-512.sasl.jaas.config":
      "org.apache.kafka.common.security.scram.ScramLoginModule required;"},
     "no username"),
])
def test_refusals_of_the_inter_broker_sasl(change, message):
    settings = {**FLEET, **change}
    settings = {k: v for k, v in settings.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        build_config(settings)


def test_ssl_keys_apply_per_listener(certs):
    config = build_config({
        "listeners": "A://127.0.0.1:9093,B://127.0.0.1:9193,C://127.0.0.1:9293",
        "listener.security.protocol.map": "A:SSL,B:SASL_SSL,C:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "ssl.keystore.location": str(certs.server_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "listener.name.b.ssl.client.auth": "required",
        "listener.name.b.ssl.truststore.location": str(certs.ca),
        "listener.name.c.ssl.client.auth": "required"})
    assert config.tls_config("A").ssl_client_auth == "none"
    assert config.tls_config("B").ssl_client_auth == "required"
    assert config.tls_config("B").ssl_keystore_location == certs.server_keystore
    assert "listener.name.c.ssl.client.auth" in config.ignored_keys  # C has no TLS
    assert config.sasl_for("B").enabled_mechanisms == ("SCRAM-SHA-256",)
    assert config.sasl_for("A") is None


def test_every_tls_listener_needs_its_keystore(certs):
    with pytest.raises(ConfigError, match="listeners=B://127.0.0.1:9193 is an SSL listener"):
        build_config({"listeners": "A://127.0.0.1:9093,B://127.0.0.1:9193",
                      "listener.security.protocol.map": "A:SSL,B:SSL",
                      "listener.name.a.ssl.keystore.location": str(certs.server_keystore)})


def test_sasl_keys_of_each_listener_are_its_own():
    plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
             'user_alice="a";')
    config = build_config({
        "listeners": "ONE://:9092,TWO://:9192",
        "listener.security.protocol.map": "ONE:SASL_PLAINTEXT,TWO:SASL_PLAINTEXT",
        "listener.name.one.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.one.plain.sasl.jaas.config": plain,
        "listener.name.two.sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    assert config.sasl_for("ONE").plain_users == {"alice": "a"}
    assert config.sasl_for("TWO").enabled_mechanisms == ("SCRAM-SHA-512",)
    assert config.sasl_for("TWO").plain_users == {}


def test_every_tls_listener_has_its_context_and_each_reloads(certs):
    import ssl

    from appliance.workers.worker import Worker

    config = build_config({
        "listeners": "A://127.0.0.1:9093,B://127.0.0.1:9193,C://127.0.0.1:9293",
        "listener.security.protocol.map": "A:SSL,B:SSL,C:PLAINTEXT",
        "ssl.keystore.location": str(certs.server_keystore), "ssl.key.password": KEY_PASSWORD,
        "listener.name.b.ssl.client.auth": "required",
        "listener.name.b.ssl.truststore.location": str(certs.ca)})
    contexts = Worker._server_tls(config)
    assert set(contexts) == {"A", "B"}
    assert contexts["A"].context.verify_mode == ssl.CERT_NONE
    assert contexts["B"].context.verify_mode == ssl.CERT_REQUIRED
    assert all(tls.reload() for tls in contexts.values())  # what SIGHUP does, per listener
