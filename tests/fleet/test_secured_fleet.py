"""A fleet whose replication runs over SASL_SSL: three appliances with
`listeners=CLIENT://...,REPLICATION://...`, REPLICATION being SASL_SSL with SCRAM-SHA-512 and
the inter-broker listener, an authorizer with `super.users=User:broker` (the brokers' own
principal, created with `klog users add` before each appliance starts).

Its znodes carry ACLs (`zookeeper.set.acl`, klog's digest identity): a ZooKeeper client
without the credentials reads what is not secret and changes nothing.

The story: every endpoint is in `/brokers/ids/N` as Kafka writes it; a stray client's replica
fetch is refused (on the client listener, without the replica's client id, without
ClusterAction); a topic of replication factor 3 is produced with acks=all (its followers fetch
over TLS, authenticated) and consumed in a group after its leader's appliance is killed."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoAuthError

import klog
from appliance.workers.replication.identity import replica_client_id
from klog.protocol.apis import create_acls, fetch
from klog.protocol.error_codes import ErrorCode
from tests.conftest import REPO
from tests.fleet.harness import (
    FleetSpec,
    appliance_of,
    kill_appliance,
    led,
    partition_state,
    running_fleet,
    zk_client,
)
from tests.polling import wait_until
from tests.security_tls.certs import KEY_PASSWORD, make_certs

CHROOT = "/secured"
BROKER_PASSWORD = "broker-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              f'username="broker" password="{BROKER_PASSWORD}";')
MESSAGES = 300
ZOOKEEPER_DIGEST = "klog:zk-secret"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def add_user(appliance, name: str, password: str) -> None:
    secret = appliance.workdir / f"{name}.password"
    secret.write_text(password + "\n")
    subprocess.run([sys.executable, "-m", "klog_cli.main", "users", "add", name,
                    "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret),
                    "--config", str(appliance.config)],
                   cwd=REPO, check=True, capture_output=True, timeout=60)


def prepare(appliance) -> None:
    add_user(appliance, "broker", BROKER_PASSWORD)
    add_user(appliance, ALICE, ALICE_PASSWORD)


@pytest.fixture(scope="module")
def fleet(ensemble, tmp_path_factory, certs):
    spec = FleetSpec(chroot=CHROOT, prepare=prepare, settings={
        "listeners": "CLIENT://127.0.0.1:{port},REPLICATION://127.0.0.1:{port2}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name": "REPLICATION",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.replication.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.replication.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.replication.ssl.keystore.location": str(certs.server_keystore),
        "listener.name.replication.ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(certs.ca),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": "true",
        "replica.lag.time.max.ms": "10000",
        "zookeeper.set.acl": "true",
        "zookeeper.digest.credentials": ZOOKEEPER_DIGEST,
    })
    with running_fleet(ensemble, tmp_path_factory.mktemp("secured"), spec) as appliances:
        yield appliances


@pytest.fixture(scope="module")
def zk(ensemble):
    client = zk_client(ensemble, CHROOT)
    yield client
    client.stop()


def as_user(appliance, index: int, certs, user: str, password: str, **options):
    """klog's Admin on the REPLICATION endpoint of worker `index`, as `user`."""
    return klog.Admin(f"127.0.0.1:{appliance.port2 + index}", security_protocol="SASL_SSL",
                      ssl_cafile=str(certs.ca), sasl_mechanism="SCRAM-SHA-512",
                      sasl_plain_username=user, sasl_plain_password=password, **options)


def replica_fetch(admin, topic: str, replica_id: int):
    answer = admin.request(fetch, replica_id=replica_id, max_wait_ms=0, min_bytes=1,
                           topics=[fetch.FetchTopic(topic=topic, partitions=[
                               fetch.FetchPartition(partition=0, fetch_offset=0,
                                                    partition_max_bytes=1 << 20)])],
                           forgotten_topics_data=[])
    return answer.responses[0].partitions[0].error_code


def create(fleet, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3)])[
        topic].result(timeout=30)
    wait_until(lambda: led(fleet[0].bootstrap, topic, partitions), 30, f"{topic} led")


def test_the_broker_znode_lists_every_endpoint(fleet, zk):
    first = fleet[0]
    registration = orjson.loads(zk.get("/brokers/ids/101")[0])
    assert registration["endpoints"] == [f"CLIENT://127.0.0.1:{first.port + 1}",
                                         f"REPLICATION://127.0.0.1:{first.port2 + 1}"]
    assert registration["listener_security_protocol_map"] == {"CLIENT": "PLAINTEXT",
                                                              "REPLICATION": "SASL_SSL"}
    assert (registration["host"], registration["port"]) == ("127.0.0.1", first.port + 1)


def test_a_stray_clients_replica_fetch_is_refused(fleet, zk, certs):
    create(fleet, "guarded", 1)
    state = partition_state(zk, "guarded", 0)
    leader = state["leader"]
    follower = next(r for r in state["isr"] if r != leader)
    owner, index = appliance_of(fleet, leader), leader % 100
    forged = replica_client_id(orjson.loads(zk.get("/cluster/id")[0])["id"], follower)
    # on the client listener, even with the replica's client id: not a replica
    with klog.Admin(f"127.0.0.1:{owner.port + index}", client_id=forged) as admin:
        assert replica_fetch(admin, "guarded", follower) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert replica_fetch(admin, "guarded", -1) == 0  # a consumer's fetch is unchanged
    # on the inter-broker listener as the broker, without the replica's client id
    with as_user(owner, index, certs, "broker", BROKER_PASSWORD) as admin:
        assert replica_fetch(admin, "guarded", follower) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # once the cluster has an ACL, ClusterAction is the broker's alone (a super user); the
    # fleet's ACLs live in ZooKeeper: made on one appliance, enforced by the leader's
    with as_user(fleet[0], 0, certs, "broker", BROKER_PASSWORD) as admin:
        answer = admin.request(create_acls, creations=[create_acls.AclCreation(
            resource_type=4, resource_name="kafka-cluster", resource_pattern_type=3,
            principal="User:broker", host="*", operation=9, permission_type=3)])
        assert answer.results[0].error_code == 0
    with as_user(owner, index, certs, ALICE, ALICE_PASSWORD, client_id=forged) as admin:
        wait_until(lambda: replica_fetch(admin, "guarded", follower)
                   == ErrorCode.TOPIC_AUTHORIZATION_FAILED, 5, "the ACL to take effect")
    # and the follower is still in sync: nothing the stray clients sent moved it
    assert follower in partition_state(zk, "guarded", 0)["isr"]


def test_zookeeper_without_credentials_changes_nothing(fleet, zk):
    """`zk` has no credentials: it reads the fleet's public znodes, not the users' secrets,
    and cannot change, add or delete anything klog wrote."""
    create(fleet, "locked", 1)
    assert orjson.loads(zk.get("/brokers/topics/locked")[0])["partitions"]
    with pytest.raises(NoAuthError):
        zk.get("/config/users/broker")
    with pytest.raises(NoAuthError):
        zk.set("/brokers/topics/locked", b'{"version":2,"partitions":{}}')
    with pytest.raises(NoAuthError):
        zk.delete("/brokers/ids/101")
    with pytest.raises(NoAuthError):
        zk.create("/brokers/ids/999", b"{}")
    with pytest.raises(NoAuthError):
        zk.delete("/controller")
    assert led(fleet[0].bootstrap, "locked", 1)


def test_acks_all_over_sasl_ssl_replication_survives_the_leaders_appliance(fleet, zk):
    create(fleet, "secured", 3)
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "acks": "all",
                         "enable.idempotence": False})
    for i in range(MESSAGES):
        producer.produce("secured", value=f"m{i}".encode(), key=str(i).encode())
    assert producer.flush(30) == 0
    # every follower fetches over TLS, authenticated as User:broker: the ISRs are whole
    wait_until(lambda: all(len(partition_state(zk, "secured", p)["isr"]) == 3
                           for p in range(3)), 30, "every replica in sync")
    # the group starts before the kill (its offsets topic needs three live appliances to
    # be created, as Kafka's does) and reads on after it
    seen = read_in_group(fleet[0].bootstrap, MESSAGES // 3)
    victim = appliance_of(fleet, partition_state(zk, "secured", 0)["leader"])
    survivors = [a for a in fleet if a is not victim]
    kill_appliance(victim)
    wait_until(lambda: partition_state(zk, "secured", 0)["leader"] // 100
               != int(victim.settings["broker.id"]), 30, "a new leader of partition 0")
    wait_until(lambda: led(survivors[0].bootstrap, "secured", 3), 30, "every partition led")
    seen |= read_in_group(survivors[0].bootstrap, MESSAGES - len(seen))
    assert seen == {f"m{i}".encode() for i in range(MESSAGES)}


def read_in_group(bootstrap: str, at_least: int) -> set[bytes]:
    """What a member of group `readers` reads until it has `at_least` messages (or two
    minutes pass), its offsets committed when it leaves."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "enable.auto.commit": False})
    consumer.subscribe(["secured"])
    seen = set()
    for _ in range(240):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
        if len(seen) >= at_least:
            break
    if seen:
        consumer.commit(asynchronous=False)
    consumer.close()
    return seen

