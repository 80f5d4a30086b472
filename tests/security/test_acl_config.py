"""The authorizer's keys: Kafka's names, Kafka's defaults, refusals naming the key."""

from __future__ import annotations

import pytest

from appliance.config import ConfigError, build_config
from appliance.security.authorizer import AuthorizerSettings


def test_no_authorizer_by_default():
    assert build_config({}).authorizer is None
    # the other keys alone do not turn it on
    assert build_config({"super.users": "User:admin"}).authorizer is None


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer",
                                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer"])
def test_kafkas_authorizers_turn_it_on_with_kafkas_defaults(name):
    assert build_config({"authorizer.class.name": name}).authorizer == AuthorizerSettings(
        super_users=frozenset(), allow_everyone_if_no_acl_found=False)


def test_super_users_and_allow_everyone():
    config = build_config({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "super.users": "User:admin;User:ops",
                           "allow.everyone.if.no.acl.found": "true"})
    assert config.authorizer == AuthorizerSettings(frozenset({"User:admin", "User:ops"}), True)


@pytest.mark.parametrize("settings, key", [
    ({"authorizer.class.name": "com.example.MyAuthorizer"}, "authorizer.class.name"),
    ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
      "allow.everyone.if.no.acl.found": "yes"}, "allow.everyone.if.no.acl.found"),
    ({"zookeeper.connect": "127.0.0.1:2181", "zookeeper.set.acl": "true"},
     "zookeeper.digest.credentials"),
    ({"zookeeper.connect": "127.0.0.1:2181", "zookeeper.digest.credentials": "klog:pw"},
     "zookeeper.set.acl"),
    ({"zookeeper.connect": "127.0.0.1:2181", "zookeeper.set.acl": "true",
      "zookeeper.digest.credentials": "klog"}, "zookeeper.digest.credentials"),
    ({"zookeeper.connect": "127.0.0.1:2181", "zookeeper.set.acl": "maybe",
      "zookeeper.digest.credentials": "klog:pw"}, "zookeeper.set.acl"),
])
def test_refusals_name_the_key(settings, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config(settings)


def test_a_fleet_may_have_an_authorizer_and_secured_znodes():
    config = build_config({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "zookeeper.connect": "127.0.0.1:2181", "zookeeper.set.acl": "true",
                           "zookeeper.digest.credentials": "klog:s3cret"})
    assert config.authorizer is not None and config.zookeeper_set_acl
    assert config.zookeeper_digest_credentials == "klog:s3cret"
    assert "s3cret" not in repr(config)
