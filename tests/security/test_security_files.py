"""The security files of an appliance alone live apart from the topic catalog, whose files are
named after topics: a topic called `acls` or `scram-credentials` must not overwrite them."""

from __future__ import annotations

import json

from appliance.control.catalog import Catalog
from appliance.control.topics import TopicInfo
from appliance.scram_credentials import credentials_path, read_users, write_users
from appliance.security.acl_file import acls_path, read_acls, write_acls
from appliance.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from klog.protocol.sasl.scram import make_credential

WRITE_A = AclBinding(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", "*",
                     Operation.WRITE, Permission.ALLOW)


def test_topics_named_after_the_security_files_leave_them_alone(tmp_path):
    write_acls(acls_path(tmp_path), frozenset({WRITE_A}))
    alice = make_credential("SCRAM-SHA-512", "alice-secret", b"0123456789abcdef", 4096)
    write_users(credentials_path(tmp_path), {"alice": {"SCRAM-SHA-512": alice}})
    catalog = Catalog(tmp_path)
    for name in ("acls", "scram-credentials"):
        catalog.put(TopicInfo(name=name, owners=(0,)))
    assert read_acls(acls_path(tmp_path)) == {WRITE_A}
    assert read_users(credentials_path(tmp_path)) == {"alice": {"SCRAM-SHA-512": alice}}
    reread = Catalog(tmp_path)
    assert sorted(i.name for i in reread.topics()) == ["acls", "scram-credentials"]
    assert reread.problems == []


def test_an_earlier_klogs_files_move_out_of_the_catalog(tmp_path):
    earlier = tmp_path / ".klog-catalog"
    earlier.mkdir()
    write_acls(earlier / "acls.json", frozenset({WRITE_A}))
    alice = make_credential("SCRAM-SHA-256", "alice-secret", b"0123456789abcdef", 4096)
    write_users(earlier / "scram-credentials.json", {"alice": {"SCRAM-SHA-256": alice}})
    assert read_acls(acls_path(tmp_path)) == {WRITE_A}
    assert read_users(credentials_path(tmp_path)) == {"alice": {"SCRAM-SHA-256": alice}}
    assert not (earlier / "acls.json").exists()
    assert not (earlier / "scram-credentials.json").exists()
    assert Catalog(tmp_path).problems == []


def test_a_topic_description_in_the_catalog_is_not_taken_for_a_security_file(tmp_path):
    Catalog(tmp_path).put(TopicInfo(name="acls", owners=(0,)))
    assert not acls_path(tmp_path).exists()
    assert json.loads((tmp_path / ".klog-catalog" / "acls.json").read_bytes())["name"] == "acls"
    assert [i.name for i in Catalog(tmp_path).topics()] == ["acls"]
