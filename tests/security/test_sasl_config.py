"""SASL's config keys (appliance/sasl_config.py through appliance/config.py): the JAAS values
as Kafka reads them, the mechanisms, and the rules for `listener.name.*` keys."""

from __future__ import annotations

import pytest

from appliance.config import ConfigError, build_config
from appliance.sasl_config import parse_jaas, plain_users

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')
SASL = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9092"}
JAAS_KEY = "listener.name.sasl_plaintext.plain.sasl.jaas.config"


def test_kafka_documentation_example():
    (entry,) = parse_jaas(PLAIN_JAAS)
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options["username"] == "admin"
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quotes_escapes_comments_and_unquoted_values():
    (entry,) = parse_jaas('  m.Login  REQUIRED /* c */ a=plain user_x="p\\"w;d"\n'
                          '// line comment\n user_y = "sp ace" ;  ')
    assert entry.flag == "required"
    assert entry.options == {"a": "plain", "user_x": 'p"w;d', "user_y": "sp ace"}


def test_several_entries_are_read_but_a_listener_key_takes_one():
    assert len(parse_jaas(PLAIN_JAAS + " " + PLAIN_JAAS)) == 2
    with pytest.raises(ConfigError, match="should be 1 module"):
        build_config({**SASL, "sasl.enabled.mechanisms": "PLAIN",
                      JAAS_KEY: PLAIN_JAAS + PLAIN_JAAS})


@pytest.mark.parametrize("text", [
    "", "m.Login required", "m.Login sometimes a=1;", 'm.Login required a="1" b;',
    'm.Login required a=;', '"m" required;',
])
def test_bad_jaas_values(text):
    with pytest.raises(ValueError):
        if not parse_jaas(text):
            raise ValueError("no entry")


def test_a_sasl_listener_with_plain_and_scram():
    config = build_config({**SASL, "sasl.enabled.mechanisms": "plain, SCRAM-SHA-512",
                           JAAS_KEY: PLAIN_JAAS,
                           "connection.failed.authentication.delay.ms": "250"})
    assert config.first_listener.security_protocol == "SASL_PLAINTEXT"
    assert config.sasl.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert config.sasl.plain_users == {"admin": "admin-secret", "alice": "alice-secret"}
    assert config.connection_failed_authentication_delay_ms == 250
    assert "admin-secret" not in repr(config)


def test_kafka_defaults():
    config = build_config({})
    assert config.sasl is None
    assert config.connection_failed_authentication_delay_ms == 100


def test_a_sasl_listener_needs_its_mechanisms_named():
    with pytest.raises(ConfigError, match="set sasl.enabled.mechanisms"):
        build_config(SASL)


@pytest.mark.parametrize("mechanisms", ["GSSAPI", "PLAIN,OAUTHBEARER", " , "])
def test_mechanisms_klog_does_not_serve_are_refused(mechanisms):
    with pytest.raises(ConfigError, match="sasl.enabled.mechanisms"):
        build_config({**SASL, "sasl.enabled.mechanisms": mechanisms, JAAS_KEY: PLAIN_JAAS})


def test_plain_needs_users():
    with pytest.raises(ConfigError, match="plain.sasl.jaas.config"):
        build_config({**SASL, "sasl.enabled.mechanisms": "PLAIN"})
    with pytest.raises(ConfigError, match="PlainLoginModule"):
        build_config({**SASL, "sasl.enabled.mechanisms": "PLAIN", JAAS_KEY:
                      'org.apache.kafka.common.security.scram.ScramLoginModule required '
                      'user_a="b";'})


def test_the_listener_list_overrides_the_global_one():
    config = build_config({**SASL, "sasl.enabled.mechanisms": "PLAIN",
                           "listener.name.sasl_plaintext.sasl.enabled.mechanisms":
                               "SCRAM-SHA-256"})
    assert config.sasl.enabled_mechanisms == ("SCRAM-SHA-256",)
    assert "sasl.enabled.mechanisms" in config.ignored_keys


def test_listener_keys_of_other_listeners_and_unused_suffixes_are_ignored():
    config = build_config({**SASL, "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                           "listener.name.internal.plain.sasl.jaas.config": "not read",
                           "listener.name.sasl_plaintext.ssl.keystore.location": "/k.pem",
                           "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config":
                               'org.apache.kafka.common.security.scram.ScramLoginModule '
                               'required username="admin" password="x";'})
    assert set(config.ignored_keys) == {
        "listener.name.internal.plain.sasl.jaas.config",
        "listener.name.sasl_plaintext.ssl.keystore.location",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"}


@pytest.mark.parametrize("key", ["listener.name.sasl_plaintext.no.such.key",
                                 "listener.name.sasl_plaintext.gssapi.sasl.jaas.config",
                                 "listener.name.x", "listener.name..plain.sasl.jaas.config"])
def test_unknown_listener_keys_are_refused(key):
    with pytest.raises(ConfigError, match="listener.name"):
        build_config({**SASL, "sasl.enabled.mechanisms": "SCRAM-SHA-256", key: "x"})


def test_a_plaintext_listener_ignores_sasl_keys():
    config = build_config({"sasl.enabled.mechanisms": "GSSAPI",
                           "listener.name.plaintext.plain.sasl.jaas.config": "x"})
    assert config.sasl is None
    assert set(config.ignored_keys) == {"sasl.enabled.mechanisms",
                                        "listener.name.plaintext.plain.sasl.jaas.config"}
