"""SCRAM users managed over the wire (KIP-554) on an appliance alone, with an authorizer:
kafka-python's and confluent-kafka's admin clients add, describe and remove users with
AlterUserScramCredentials / DescribeUserScramCredentials, and a client then logs in with the
new user (or no longer can); Kafka's errors for what Kafka refuses; a principal without
ALTER / DESCRIBE on the cluster is refused."""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism as PyScramMechanism
from kafka.admin import UserScramCredentialDeletion as PyDeletion
from kafka.admin import UserScramCredentialUpsertion as PyUpsertion
from kafka.errors import ClusterAuthorizationFailedError

from klog.protocol.error_codes import ErrorCode
from tests.security.helpers import PLAIN_USERS, confluent_conf, python_conf, sasl_appliance

pytestmark = pytest.mark.interop
ADMIN = ("PLAIN", "admin", PLAIN_USERS["admin"])
ALICE = ("PLAIN", "alice", PLAIN_USERS["alice"])  # no ACL: may not manage users
_names = itertools.count()


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    started = sasl_appliance(tmp_path_factory.mktemp("scram-admin"), log_dirs=2, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"}).start()
    yield started
    started.stop()


def py_admin(appliance, who=ADMIN) -> KafkaAdminClient:
    return KafkaAdminClient(**python_conf(appliance.bootstrap, *who))


def admin(appliance, who=ADMIN) -> AdminClient:
    return AdminClient(confluent_conf(appliance.bootstrap, *who))


def logs_in(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a confluent-kafka client authenticates (it then gets Metadata)."""
    producer = Producer({**confluent_conf(bootstrap, mechanism, user, password),
                         "socket.timeout.ms": 5000})
    try:
        producer.list_topics(timeout=5)
        return True
    except KafkaException:
        return False


def new_user() -> str:
    return f"user{next(_names)}"


def test_kafka_python_adds_describes_and_removes_a_user(appliance):
    client = py_admin(appliance)
    name = new_user()
    assert client.alter_user_scram_credentials([
        PyUpsertion(name, "SCRAM-SHA-512", "bob's password", iterations=8192)]) == {name: None}
    described = client.describe_user_scram_credentials([name])
    assert described[name]["error"] is None
    assert described[name]["credential_infos"] == [
        {"mechanism": PyScramMechanism.SCRAM_SHA_512, "iterations": 8192}]
    assert logs_in(appliance.bootstrap, "SCRAM-SHA-512", name, "bob's password")
    assert not logs_in(appliance.bootstrap, "SCRAM-SHA-512", name, "wrong")
    assert client.alter_user_scram_credentials([
        PyDeletion(name, "SCRAM-SHA-512")]) == {name: None}
    assert not logs_in(appliance.bootstrap, "SCRAM-SHA-512", name, "bob's password")
    client.close()


def test_confluent_kafka_adds_and_describes_a_user(appliance):
    name = new_user()
    client = admin(appliance)
    futures = client.alter_user_scram_credentials([
        UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                               4096), b"carol pw"),
        UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                               10000), b"carol pw")])
    futures[name].result(timeout=30)
    described = client.describe_user_scram_credentials([name])[name].result(timeout=30)
    infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 10000)}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert logs_in(appliance.bootstrap, mechanism, name, "carol pw")
    everyone = client.describe_user_scram_credentials().result(timeout=30)
    assert name in everyone and "scrammy" in everyone  # the user `klog users` added
    client.alter_user_scram_credentials([
        UserScramCredentialDeletion(name, ScramMechanism.SCRAM_SHA_256)])[name].result(30)
    assert not logs_in(appliance.bootstrap, "SCRAM-SHA-256", name, "carol pw")
    assert logs_in(appliance.bootstrap, "SCRAM-SHA-512", name, "carol pw")


def error_of(future) -> int:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=30)
    return raised.value.args[0].code()


def test_kafkas_errors(appliance):
    client = admin(appliance)
    few, many, dup = new_user(), new_user(), new_user()
    futures = client.alter_user_scram_credentials([
        UserScramCredentialUpsertion(few, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                              1000), b"x"),
        UserScramCredentialUpsertion(many, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                               20000), b"x"),
        UserScramCredentialUpsertion(dup, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                              4096), b"x"),
        UserScramCredentialDeletion(dup, ScramMechanism.SCRAM_SHA_256),
        UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_512)])
    assert error_of(futures[few]) == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert error_of(futures[many]) == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert error_of(futures[dup]) == ErrorCode.DUPLICATE_RESOURCE
    assert error_of(futures["nobody"]) == ErrorCode.RESOURCE_NOT_FOUND
    assert not logs_in(appliance.bootstrap, "SCRAM-SHA-256", dup, "x")  # nothing of it applied
    described = client.describe_user_scram_credentials(["nobody"])
    assert error_of(described["nobody"]) == ErrorCode.RESOURCE_NOT_FOUND


def test_an_unknown_mechanism_is_unsupported(appliance):
    """kafka-python's request class sent as it is (its admin refuses UNKNOWN client-side)."""
    from kafka.protocol.admin import AlterUserScramCredentialsRequest
    client = py_admin(appliance)

    async def send():
        return await client._manager.send(AlterUserScramCredentialsRequest(
            deletions=[("dave", 0)], upsertions=[("erin", 3, 4096, b"s" * 16, b"p" * 64)]))
    response = client._manager.run(send)
    assert {r.user: r.error_code for r in response.results} == {
        "dave": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "erin": ErrorCode.UNSUPPORTED_SASL_MECHANISM}
    client.close()


def test_without_alter_or_describe_on_the_cluster_it_is_refused(appliance):
    client = py_admin(appliance, ALICE)
    name = new_user()
    result = client.alter_user_scram_credentials([PyUpsertion(name, "SCRAM-SHA-512", "pw")])
    assert result[name] is not None  # an error message
    assert not logs_in(appliance.bootstrap, "SCRAM-SHA-512", name, "pw")
    with pytest.raises(ClusterAuthorizationFailedError):
        client.describe_user_scram_credentials()
    client.close()
