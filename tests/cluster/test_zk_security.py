"""A fleet's security in ZooKeeper, against a real ensemble: two appliances of two workers on
SASL_PLAINTEXT with an authorizer and `zookeeper.set.acl`.

- A SCRAM user added with `klog users add --config` before any appliance started (it writes
  /config/users in ZooKeeper) logs in on every worker of every appliance.
- A user added with AlterUserScramCredentials on one appliance logs in on the other within a
  second; removed there, it no longer can.
- An ACL created on one appliance is enforced by every worker of the other within a second,
  and its removal too; the znodes are Kafka's.
- A ZooKeeper client without klog's digest credentials reads what is not secret but cannot
  change or delete klog's znodes, nor read /config/users; the fleet works on.

The ensemble and the fleet start once for the module (the tests read as one story)."""

from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

from tests.conftest import REPO, Appliance, free_ports
from tests.fleet.zookeeper import Ensemble, unavailable_reason
from tests.polling import wait_until
from tests.security.helpers import MECHANISMS, PLAIN_USERS, plain_jaas

pytestmark = pytest.mark.interop
CHROOT = "/klog-zk-security"
ZK_CREDENTIALS = "klog:zk-secret"
ADMIN = ("PLAIN", "admin", PLAIN_USERS["admin"])
ALICE, ALICE_PASSWORD = "alice", "alice's scram password"


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    zk = Ensemble(tmp_path_factory.mktemp("zk"))
    try:
        zk.start()
        yield zk
    finally:
        zk.close()


def klog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def fleet(ensemble, tmp_path_factory):
    root = tmp_path_factory.mktemp("zk-security")
    appliances = []
    for broker_id in (1, 2):
        port = free_ports(2)
        appliances.append(Appliance(root / f"a{broker_id}", log_dirs=2, port=port, settings={
            "broker.id": str(broker_id),
            "zookeeper.connect": f"{ensemble.connect}{CHROOT}",
            "zookeeper.session.timeout.ms": "6000",
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": MECHANISMS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(PLAIN_USERS),
            # the appliances replicate on it too, as User:admin (the JAAS's username)
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "zookeeper.set.acl": "true",
            "zookeeper.digest.credentials": ZK_CREDENTIALS,
            "offsets.topic.replication.factor": "1",
        }))
    secret = root / "alice-password"
    secret.write_text(ALICE_PASSWORD + "\n")
    added = klog("users", "add", ALICE, "--mechanism", "SCRAM-SHA-512", "--password-file",
                 str(secret), "--config", str(appliances[0].config))
    assert added.returncode == 0, added.stderr
    assert "ZooKeeper" in added.stdout
    acl = klog("acls", "add", "--allow-principal", f"User:{ALICE}", "--operation", "Read",
               "--group", "billing", "--config", str(appliances[1].config))
    assert acl.returncode == 0 and "ZooKeeper" in acl.stdout, acl.stderr
    try:
        for appliance in appliances:
            appliance.start(timeout_s=60)
        yield appliances
    finally:
        for appliance in appliances:
            appliance.stop()


def conf(port: int, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 5000}


def topics_seen(port: int, mechanism: str, user: str, password: str) -> set[str] | None:
    """The topics a worker's Metadata lists to this user; None if the login fails."""
    producer = Producer(conf(port, mechanism, user, password))
    try:
        return set(producer.list_topics(timeout=5).topics)
    except KafkaException:
        return None


def logs_in(port: int, mechanism: str, user: str, password: str) -> bool:
    """Whether a confluent-kafka client authenticates with a worker: True once Metadata
    comes, False as soon as the client reports the authentication failed."""
    failed = []
    producer = Producer({**conf(port, mechanism, user, password),
                         "error_cb": lambda error: failed.append(error.code())})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=0.2)
            return True
        except KafkaException:
            producer.poll(0)
            if KafkaError._AUTHENTICATION in failed:
                return False
    raise AssertionError(f"no answer from port {port} within 10 s")


def every_port(fleet) -> list[int]:
    return [port for appliance in fleet for port in appliance.ports()]


def zk(ensemble, credentials: str | None = None):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=f"{ensemble.connect}{CHROOT}",
                         auth_data=[("digest", credentials)] if credentials else None)
    client.start(timeout=10)
    return client


def py_admin(port: int) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}",
                            security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                            sasl_plain_username="admin", sasl_plain_password=ADMIN[2])


def within_a_second(check, what: str) -> None:
    """`check` comes true no later than a second after now (half a second more for the
    login that observes it)."""
    start = time.monotonic()
    began = wait_until(lambda: check() and time.monotonic(), 5, what, interval_s=0.05)
    assert began - start < 1.5, f"{what}: took {began - start:.2f} s"


def test_a_user_added_before_start_logs_in_everywhere(fleet):
    for port in every_port(fleet):
        assert logs_in(port, "SCRAM-SHA-512", ALICE, ALICE_PASSWORD), port
        assert not logs_in(port, "SCRAM-SHA-512", ALICE, "wrong"), port


def test_an_acl_added_with_klog_acls_before_start_is_in_force_everywhere(fleet):
    for appliance in fleet:
        admin = AdminClient(conf(appliance.port, *ADMIN))
        found = admin.describe_acls(AclBindingFilter(
            ResourceType.GROUP, "billing", ResourcePatternType.LITERAL, None, None,
            AclOperation.ANY, AclPermissionType.ANY)).result(timeout=30)
        assert [(b.principal, b.operation) for b in found] == [
            (f"User:{ALICE}", AclOperation.READ)]
    listed = klog("acls", "list", "--group", "billing", "--config", str(fleet[0].config))
    assert listed.returncode == 0 and f"User:{ALICE}" in listed.stdout


def test_a_user_added_over_the_wire_on_one_logs_in_on_the_other_within_a_second(fleet):
    admin = py_admin(fleet[0].port)
    assert admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", "SCRAM-SHA-512", "bob pw")]) == {"bob": None}
    for port in [*fleet[1].ports(), *fleet[0].ports()]:
        within_a_second(lambda p=port: logs_in(p, "SCRAM-SHA-512", "bob", "bob pw"),
                        f"bob to log in on port {port}")
    assert admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("bob", "SCRAM-SHA-512")]) == {"bob": None}
    for port in fleet[1].ports():
        within_a_second(lambda p=port: not logs_in(p, "SCRAM-SHA-512", "bob", "bob pw"),
                        f"bob to be refused on port {port}")
    described = py_admin(fleet[1].port).describe_user_scram_credentials()
    assert set(described) == {ALICE}
    admin.close()


def test_an_acl_created_on_one_is_enforced_by_the_other_within_a_second(fleet, ensemble):
    admin = AdminClient(conf(fleet[0].port, *ADMIN))
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(timeout=30)
    for port in every_port(fleet):
        assert "orders" not in topics_seen(port, "SCRAM-SHA-512", ALICE, ALICE_PASSWORD)
    binding = AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED,
                         f"User:{ALICE}", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(timeout=30)
    for port in fleet[1].ports():
        within_a_second(lambda p=port: "orders" in topics_seen(p, "SCRAM-SHA-512", ALICE,
                                                               ALICE_PASSWORD),
                        f"alice to see orders on port {port}")
    client = zk(ensemble)
    data, _ = client.get("/kafka-acl-extended/prefixed/Topic/ord")
    assert orjson.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
         "host": "*"}]}
    assert client.get_children("/kafka-acl-extended-changes")
    client.stop()
    other = AdminClient(conf(fleet[1].port, *ADMIN))
    found = other.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=30)
    assert binding in found
    other.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, None, None, AclOperation.ANY,
        AclPermissionType.ANY)])
    for port in fleet[0].ports():
        within_a_second(lambda p=port: "orders" not in topics_seen(p, "SCRAM-SHA-512", ALICE,
                                                                   ALICE_PASSWORD),
                        f"alice to lose orders on port {port}")


def test_without_the_digest_a_zookeeper_client_changes_nothing(fleet, ensemble):
    from kazoo.exceptions import NoAuthError
    admin = AdminClient(conf(fleet[0].port, *ADMIN))
    admin.create_topics([NewTopic("audit", 1, 1)])["audit"].result(timeout=30)
    stranger = zk(ensemble)
    try:
        data, _ = stranger.get("/brokers/topics/audit")  # not secret: world READ
        assert orjson.loads(data)["partitions"]
        with pytest.raises(NoAuthError):
            stranger.get(f"/config/users/{ALICE}")
        with pytest.raises(NoAuthError):
            stranger.get_children("/config/users")
        for path in ("/brokers/topics/audit", "/cluster/id", "/controller_epoch"):
            with pytest.raises(NoAuthError):
                stranger.set(path, b"{}")
        with pytest.raises(NoAuthError):
            stranger.delete("/brokers/topics/audit", recursive=True)
        with pytest.raises(NoAuthError):
            stranger.create("/brokers/topics/intruder", b"{}")
        with pytest.raises(NoAuthError):
            stranger.create("/admin/delete_topics/audit", b"")
        with pytest.raises(NoAuthError):
            stranger.set("/kafka-acl/Topic/audit" if stranger.exists("/kafka-acl/Topic/audit")
                         else "/kafka-acl", b"{}")
    finally:
        stranger.stop()
    klog_client = zk(ensemble, ZK_CREDENTIALS)
    try:
        data, _ = klog_client.get(f"/config/users/{ALICE}")
        assert "SCRAM-SHA-512" in orjson.loads(data)["config"]
    finally:
        klog_client.stop()
    # a config without the credentials is told so, naming the key
    bare = fleet[0].config.with_name("no-credentials.properties")
    bare.write_text("".join(line + "\n" for line in fleet[0].config.read_text().splitlines()
                            if not line.startswith(("zookeeper.set.acl",
                                                    "zookeeper.digest.credentials"))))
    refused = klog("users", "list", "--config", str(bare))
    assert refused.returncode == 1 and "zookeeper.digest.credentials" in refused.stderr
    # klog's tools write with the config's credentials
    elect = klog("cluster", "elect-leaders", "--config", str(fleet[0].config),
                 "--all-topic-partitions")
    assert elect.returncode == 0, elect.stdout + elect.stderr
    # the fleet works on: the admin writes and reads back through either appliance
    producer = Producer({**conf(fleet[1].port, *ADMIN), "acks": "all"})
    producer.produce("audit", value=b"still here")
    assert producer.flush(30) == 0
    assert "audit" in topics_seen(fleet[1].port, *ADMIN)


def test_users_written_before_zookeeper_set_acl_are_locked_at_start(ensemble):
    """Users a fleet stored while open get the secret ACL when a secured store starts (the
    rest of the znodes made before keep theirs: README, "ZooKeeper's own ACLs")."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    from cluster.security_store import SecurityStore
    from cluster.security_znodes import UserConfig
    from cluster.session import Session
    from klog.protocol.sasl.scram import ScramCredential

    chroot = f"{CHROOT}-migrated"
    opened = KazooClient(hosts=f"{ensemble.connect}{chroot}")
    _ensure(ensemble, chroot)
    opened.start(timeout=10)
    try:
        node = UserConfig({"SCRAM-SHA-256": ScramCredential(b"s", 4096, b"k", b"v")}, {})
        opened.create("/config/users/old", node.encode(), makepath=True)
        session = Session(f"{ensemble.connect}{chroot}", session_timeout_ms=6000,
                          connection_timeout_ms=10_000, digest_credentials=ZK_CREDENTIALS,
                          set_acl=True)
        session.start()
        try:
            store = SecurityStore(session)
            store.prepare()
            store.refresh()
            assert set(store.users()) == {"old"}
        finally:
            session.stop()
        with pytest.raises(NoAuthError):
            opened.get("/config/users/old")
        with pytest.raises(NoAuthError):
            opened.get_children("/config/users")
    finally:
        opened.stop()


def _ensure(ensemble, chroot: str) -> None:
    from kazoo.client import KazooClient
    root = KazooClient(hosts=ensemble.connect)
    root.start(timeout=10)
    try:
        root.ensure_path(chroot)
    finally:
        root.stop()
