"""The security znodes' formats, Kafka's own: SCRAM credentials in /config/users/<name>, ACLs in
/kafka-acl*, and the change notifications; and the per-user checks of AlterUserScramCredentials."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import orjson
import pytest

from appliance.scram_alterations import plan
from appliance.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from appliance.security.fleet_acl_book import binding_of_row, entry_of, resource_of
from cluster import security_znodes as sz
from cluster.znodes import ZnodeError
from klog.protocol.error_codes import ErrorCode
from klog.protocol.sasl.scram import ScramCredential, make_credential

CREDENTIAL = ScramCredential(b"salt-bytes", 4096, b"stored-key", b"server-key")


def test_a_scram_credential_is_kafkas_string():
    text = sz.format_credential(CREDENTIAL)
    b64 = lambda v: base64.b64encode(v).decode()  # noqa: E731
    assert text == (f"salt={b64(b'salt-bytes')},stored_key={b64(b'stored-key')},"
                    f"server_key={b64(b'server-key')},iterations=4096")
    assert sz.parse_credential(text) == CREDENTIAL


def test_a_users_node_keeps_what_klog_does_not_own():
    data = orjson.dumps({"version": 1, "config": {
        "SCRAM-SHA-512": sz.format_credential(CREDENTIAL), "producer_byte_rate": "1024"}})
    node = sz.UserConfig.decode(data, "/config/users/alice")
    assert node.credentials == {"SCRAM-SHA-512": CREDENTIAL}
    assert node.other == {"producer_byte_rate": "1024"}
    again = orjson.loads(node.encode())
    assert again["version"] == 1 and again["config"]["producer_byte_rate"] == "1024"
    assert sz.UserConfig.decode(node.encode(), "p") == node


def test_a_bad_users_node_names_its_path():
    with pytest.raises(ZnodeError, match="/config/users/bob"):
        sz.UserConfig.decode(b'{"version":1,"config":{"SCRAM-SHA-256":"salt=??"}}',
                             "/config/users/bob")


def test_config_change_notification():
    assert orjson.loads(sz.encode_config_change("users/alice")) == {
        "version": 2, "entity_path": "users/alice"}


def test_acl_paths_and_json_are_kafkas():
    literal = sz.AclResource("TOPIC", "LITERAL", "orders")
    prefixed = sz.AclResource("TRANSACTIONAL_ID", "PREFIXED", "tx-")
    assert literal.path == "/kafka-acl/Topic/orders"
    assert prefixed.path == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert sz.resource_of_path(literal.path) == literal
    assert sz.resource_of_path(prefixed.path) == prefixed
    entries = {sz.AclEntry("User:alice", "ALLOW", "READ", "*"),
               sz.AclEntry("User:bob", "DENY", "IDEMPOTENT_WRITE", "10.0.0.1")}
    raw = orjson.loads(sz.encode_acls(entries))
    assert raw == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"},
        {"principal": "User:bob", "permissionType": "Deny", "operation": "IdempotentWrite",
         "host": "10.0.0.1"}]}
    assert sz.decode_acls(sz.encode_acls(entries), "p") == entries


def test_acl_change_notifications():
    assert sz.AclResource("TOPIC", "LITERAL", "a").change_notification() == (
        "/kafka-acl-changes/acl_changes_", b"TOPIC:a")
    where, data = sz.AclResource("GROUP", "PREFIXED", "g-").change_notification()
    assert where == "/kafka-acl-extended-changes/acl_changes_"
    assert orjson.loads(data) == {"version": 1, "resourceType": "GROUP", "name": "g-",
                                  "patternType": "PREFIXED"}


def test_an_unknown_operation_is_reported():
    with pytest.raises(ZnodeError, match="unknown operation"):
        sz.decode_acls(b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
                       b'"operation":"Fly","host":"*"}]}', "/kafka-acl/Topic/a")


def test_only_users_are_secret():
    assert sz.is_secret("/config/users") and sz.is_secret("/config/users/alice")
    assert not sz.is_secret("/config/topics/a") and not sz.is_secret("/kafka-acl/Topic/a")
    assert not sz.is_secret("/config/usersx")


def test_an_acl_binding_round_trips_through_a_store_row():
    acl = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ops",
                     "*", Operation.CLUSTER_ACTION, Permission.ALLOW)
    row = (*resource_of(acl), *entry_of(acl))
    assert binding_of_row(row) == acl
    assert sz.AclResource(*resource_of(acl)).path == "/kafka-acl/Cluster/kafka-cluster"


# AlterUserScramCredentials' checks ------------------------------------------------------------

def up(name, mechanism=2, iterations=4096):
    return SimpleNamespace(name=name, mechanism=mechanism, iterations=iterations,
                           salt=b"s" * 16, salted_password=b"p" * 64)


def down(name, mechanism=2):
    return SimpleNamespace(name=name, mechanism=mechanism)


def test_the_checks_answer_per_user():
    users = {"old": {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "x", b"s" * 16, 4096)}}
    outcome = plan([down("old"), down("ghost"), down("twice")],
                   [up("new"), up(""), up("mech", mechanism=0), up("few", iterations=4095),
                    up("many", iterations=16385), up("twice")], users)
    codes = {name: code for name, (code, _) in outcome.errors.items()}
    assert codes == {"old": ErrorCode.NONE, "ghost": ErrorCode.RESOURCE_NOT_FOUND,
                     "twice": ErrorCode.DUPLICATE_RESOURCE, "new": ErrorCode.NONE,
                     "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "mech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                     "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "many": ErrorCode.UNACCEPTABLE_CREDENTIAL}
    assert {(c.user, c.credential is None) for c in outcome.changes} == {
        ("old", True), ("new", False)}
    new = next(c.credential for c in outcome.changes if c.user == "new")
    assert new.iterations == 4096 and new.salt == b"s" * 16
