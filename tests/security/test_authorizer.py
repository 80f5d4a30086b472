"""The decision alone (appliance.security.authorizer): plain data in, a bool out, each of
Kafka's AclAuthorizer rules, with the examples of Kafka's authorization documentation."""

from __future__ import annotations

import pytest

from appliance.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding,
    invalid_reason,
)
from appliance.security.authorizer import (
    AclIndex,
    AuthorizerSettings,
    authorize,
    parse_super_users,
)

T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation
STRICT = AuthorizerSettings()


def acl(rtype, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=LIT):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def may(acls, op, rtype, name, principal="User:alice", host="127.0.0.1", settings=STRICT):
    return authorize(AclIndex(acls), settings, principal, host, op, rtype, name)


def test_no_acls_refuses_by_default_and_allow_everyone_permits():
    assert not may([], Op.READ, T, "a")
    assert may([], Op.READ, T, "a", settings=AuthorizerSettings(
        allow_everyone_if_no_acl_found=True))


def test_allow_everyone_applies_only_to_resources_without_any_acl():
    # an ACL for bob on topic a: a has ACLs, so alice is refused even with allow.everyone
    acls = [acl(T, "a", Op.READ, principal="User:bob")]
    everyone = AuthorizerSettings(allow_everyone_if_no_acl_found=True)
    assert not may(acls, Op.READ, T, "a", settings=everyone)
    assert may(acls, Op.READ, T, "b", settings=everyone)


def test_literal_allow_permits_that_operation_on_that_resource_only():
    acls = [acl(T, "a", Op.WRITE)]
    assert may(acls, Op.WRITE, T, "a")
    assert not may(acls, Op.READ, T, "a")
    assert not may(acls, Op.WRITE, T, "b")
    assert not may(acls, Op.WRITE, T, "ab")
    assert not may(acls, Op.WRITE, G, "a")  # another resource type, same name


def test_principal_must_match_exactly_or_be_the_wildcard():
    acls = [acl(T, "a", Op.READ, principal="User:bob")]
    assert not may(acls, Op.READ, T, "a")
    assert may(acls, Op.READ, T, "a", principal="User:bob")
    star = [acl(T, "a", Op.READ, principal="User:*")]
    assert may(star, Op.READ, T, "a")
    assert may(star, Op.READ, T, "a", principal="User:ANONYMOUS")


def test_host_must_match_exactly_or_be_the_wildcard():
    acls = [acl(T, "a", Op.READ, host="198.51.100.0")]
    assert not may(acls, Op.READ, T, "a", host="198.51.100.1")
    assert may(acls, Op.READ, T, "a", host="198.51.100.0")


def test_literal_wildcard_resource_covers_every_name():
    acls = [acl(T, "*", Op.READ)]
    assert may(acls, Op.READ, T, "a")
    assert may(acls, Op.READ, T, "anything")
    assert not may(acls, Op.READ, G, "a")


def test_prefixed_covers_names_that_start_with_it():
    # Kafka's docs: --resource-pattern-type prefixed --topic Test-
    acls = [acl(T, "Test-", Op.WRITE, pattern=PRE)]
    assert may(acls, Op.WRITE, T, "Test-topic")
    assert may(acls, Op.WRITE, T, "Test-")
    assert not may(acls, Op.WRITE, T, "Test")
    assert not may(acls, Op.WRITE, T, "test-topic")


def test_deny_beats_allow():
    # Kafka's docs: allow everyone to read Test-topic except BadBob
    acls = [acl(T, "Test-topic", Op.READ, principal="User:*"),
            acl(T, "Test-topic", Op.READ, DENY, principal="User:BadBob")]
    assert may(acls, Op.READ, T, "Test-topic", principal="User:alice")
    assert not may(acls, Op.READ, T, "Test-topic", principal="User:BadBob")


def test_deny_from_a_host_only_refuses_that_host():
    acls = [acl(T, "a", Op.READ), acl(T, "a", Op.READ, DENY, host="198.51.100.3")]
    assert may(acls, Op.READ, T, "a", host="198.51.100.1")
    assert not may(acls, Op.READ, T, "a", host="198.51.100.3")


def test_deny_through_wildcard_and_prefix_beats_literal_allow():
    allow = acl(T, "secret-1", Op.READ)
    assert not may([allow, acl(T, "*", Op.READ, DENY)], Op.READ, T, "secret-1")
    assert not may([allow, acl(T, "secret-", Op.READ, DENY, pattern=PRE)], Op.READ, T,
                   "secret-1")


def test_deny_all_refuses_every_operation():
    acls = [acl(T, "a", Op.READ), acl(T, "a", Op.WRITE), acl(T, "a", Op.ALL, DENY)]
    for op in (Op.READ, Op.WRITE, Op.DESCRIBE):
        assert not may(acls, op, T, "a")


def test_deny_of_an_implying_operation_does_not_deny_the_implied_one():
    # DENY READ does not refuse DESCRIBE that an ALLOW DESCRIBE permits (Kafka's rule)
    acls = [acl(T, "a", Op.DESCRIBE), acl(T, "a", Op.READ, DENY)]
    assert may(acls, Op.DESCRIBE, T, "a")
    assert not may(acls, Op.READ, T, "a")


def test_allow_all_permits_every_operation():
    acls = [acl(T, "a", Op.ALL)]
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
               Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert may(acls, op, T, "a")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied_by_read_write_delete_alter(granted):
    assert may([acl(T, "a", granted)], Op.DESCRIBE, T, "a")


@pytest.mark.parametrize("granted", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_describe_is_not_implied_by_others(granted):
    assert not may([acl(T, "a", granted)], Op.DESCRIBE, T, "a")


def test_describe_configs_is_implied_by_alter_configs_only():
    assert may([acl(T, "a", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, T, "a")
    assert not may([acl(T, "a", Op.ALTER)], Op.DESCRIBE_CONFIGS, T, "a")


def test_implication_goes_one_way():
    assert not may([acl(T, "a", Op.DESCRIBE)], Op.READ, T, "a")
    assert not may([acl(T, "a", Op.READ)], Op.WRITE, T, "a")


def test_cluster_and_transactional_id_resources():
    acls = [acl(C, "kafka-cluster", Op.IDEMPOTENT_WRITE), acl(X, "tx-", Op.WRITE, pattern=PRE)]
    assert may(acls, Op.IDEMPOTENT_WRITE, C, "kafka-cluster")
    assert not may(acls, Op.CLUSTER_ACTION, C, "kafka-cluster")
    assert may(acls, Op.WRITE, X, "tx-1")
    assert may(acls, Op.DESCRIBE, X, "tx-1")


def test_super_users_may_do_everything_even_against_a_deny():
    settings = AuthorizerSettings(super_users=parse_super_users("User:admin; User:ops"))
    acls = [acl(T, "a", Op.ALL, DENY, principal="User:*")]
    assert may(acls, Op.DELETE, T, "a", principal="User:admin", settings=settings)
    assert may([], Op.CLUSTER_ACTION, C, "kafka-cluster", principal="User:ops",
               settings=settings)
    assert not may(acls, Op.READ, T, "a", principal="User:alice", settings=settings)


def test_parse_super_users():
    assert parse_super_users("User:a;User:b ;; ") == frozenset({"User:a", "User:b"})
    assert parse_super_users("") == frozenset()


def test_invalid_bindings_are_named():
    assert invalid_reason(acl(T, "a", Op.READ)) is None
    assert invalid_reason(acl(G, "g", Op.WRITE))  # WRITE does not apply to groups
    assert invalid_reason(acl(C, "other", Op.ALTER))
    assert invalid_reason(acl(T, "a", Op.READ, principal="alice"))
    assert invalid_reason(acl(T, "a", Op.ANY))
    assert invalid_reason(acl(T, "a", Op.READ, Permission.ANY))
    assert invalid_reason(acl(T, "a", Op.READ, pattern=PatternType.MATCH))
    assert invalid_reason(binding(99, "a", 3, "User:a", "*", 3, 3))  # unknown type


def test_filters_select_as_kafka():
    lit = acl(T, "a", Op.READ)
    star = acl(T, "*", Op.READ, principal="User:bob")
    pre = acl(T, "a-", Op.WRITE, pattern=PRE)
    group = acl(G, "a", Op.READ)
    every = [lit, star, pre, group]

    def chosen(f):
        return {a for a in every if f.matches(a)}

    assert chosen(AclFilter()) == set(every)
    assert chosen(AclFilter(ResourceType.TOPIC)) == {lit, star, pre}
    assert chosen(AclFilter(T, "a", LIT)) == {lit}
    assert chosen(AclFilter(T, "a-", PRE)) == {pre}
    assert chosen(AclFilter(T, "a-1", PatternType.MATCH)) == {star, pre}
    assert chosen(AclFilter(T, "a", PatternType.MATCH)) == {lit, star}
    assert chosen(AclFilter(principal="User:bob")) == {star}
    assert chosen(AclFilter(operation=Op.WRITE)) == {pre}
    assert chosen(AclFilter(permission=DENY)) == set()


def test_binding_roundtrips_through_its_dict():
    a = acl(T, "a-", Op.WRITE, DENY, pattern=PRE, host="10.0.0.1")
    assert AclBinding.from_dict(a.to_dict()) == a
    with pytest.raises(ValueError):
        AclBinding.from_dict({**a.to_dict(), "principal": "nobody"})
