"""ACLs with real clients, on one appliance of two workers with an authorizer, over
SASL_PLAINTEXT: SCRAM users made with `klog users add`, the first ACLs written with `klog acls
add --config` before the first start, the rest through CreateAcls/DeleteAcls by clients.

`alice` may write topic `a` and read it with group `g`, and nothing more; `admin` is a super
user (PLAIN, from the JAAS key)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import errors as kafka_errors
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewPartitions,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as PyResourceType

import klog as klog_client
from klog.protocol.apis import fetch, init_producer_id, list_offsets, write_txn_markers
from klog.protocol.apis import produce as produce_api
from klog.protocol.records import build_batch
from tests.conftest import REPO
from tests.security.helpers import (
    PLAIN_USERS,
    SCRAM_PASSWORD,
    SCRAM_USER,
    confluent_conf,
    python_conf,
    sasl_appliance,
)

pytestmark = pytest.mark.interop
ALICE, ALICE_PASSWORD = "alice", "alice's scram password"
ADMIN = ("PLAIN", "admin", PLAIN_USERS["admin"])
AS_ALICE = ("SCRAM-SHA-512", ALICE, ALICE_PASSWORD)
_names = itertools.count()


def klog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "klog_cli.main", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("acls")
    configured = sasl_appliance(workdir, log_dirs=2, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ops"})
    secret = workdir / "alice-password"
    secret.write_text(ALICE_PASSWORD + "\n")
    config = str(configured.config)
    assert klog("users", "add", ALICE, "--mechanism", "SCRAM-SHA-512", "--password-file",
                str(secret), "--config", config).returncode == 0
    for args in (["--operation", "Write", "--operation", "Read", "--topic", "a"],
                 ["--operation", "Read", "--group", "g"]):
        done = klog("acls", "add", "--allow-principal", f"User:{ALICE}", *args,
                    "--config", config)
        assert done.returncode == 0, done.stderr
    started = configured.start()
    admin = AdminClient(conf(started, ADMIN))
    for topic in ("a", "b"):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    yield started
    started.stop()


def conf(appliance, who) -> dict:
    return confluent_conf(appliance.bootstrap, *who)


def py_conf(appliance, who) -> dict:
    return python_conf(appliance.bootstrap, *who)


def produce(appliance, who, topic, partition=None, n=5) -> list:
    """The delivery errors of `n` records (an empty list: all written)."""
    producer = Producer({**conf(appliance, who), "message.timeout.ms": 10_000,
                         "enable.idempotence": False})
    errors = []
    for i in range(n):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=f"v{i}", on_delivery=lambda err, msg: err and
                         errors.append(err.code()), **kwargs)
    producer.flush(20)
    return errors


def consume_error(appliance, who, topic, group) -> int | None:
    """The first error a consumer in `group` meets reading `topic` (None: it read records)."""
    consumer = Consumer({**conf(appliance, who), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error().code()
            return None
        raise AssertionError("neither records nor an error")
    finally:
        consumer.close()


def create_topic(appliance, name: str, partitions: int) -> None:
    admin = AdminClient(conf(appliance, ADMIN))  # kept alive until the answer
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def new_name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def test_alice_writes_a_and_reads_it_with_group_g(appliance):
    assert produce(appliance, AS_ALICE, "a") == []
    consumer = Consumer({**conf(appliance, AS_ALICE), "group.id": "g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["a"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert len(got) >= 5


def test_kafka_python_alice_writes_a_and_reads_it_with_group_g(appliance):
    producer = KafkaProducer(**py_conf(appliance, AS_ALICE))
    producer.send("a", b"from kafka-python").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer("a", group_id="g", auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000, **py_conf(appliance, AS_ALICE))
    assert any(m.value == b"from kafka-python" for m in consumer)
    consumer.close()


def test_alice_may_not_produce_to_b(appliance):
    assert set(produce(appliance, AS_ALICE, "b")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    producer = KafkaProducer(**py_conf(appliance, AS_ALICE), max_block_ms=10_000)
    with pytest.raises(kafka_errors.TopicAuthorizationFailedError):
        producer.send("b", b"x").get(timeout=30)
    producer.close()


def test_alice_may_not_read_b(appliance):
    # group g is hers: only the topic is refused
    assert consume_error(appliance, AS_ALICE, "b", "g") == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_alice_may_not_join_group_h(appliance):
    assert consume_error(appliance, AS_ALICE, "a", "h") == KafkaError.GROUP_AUTHORIZATION_FAILED
    consumer = KafkaConsumer("a", group_id="h", consumer_timeout_ms=10_000,
                             **py_conf(appliance, AS_ALICE))
    with pytest.raises(kafka_errors.GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10_000)
    consumer.close()


def test_metadata_lists_only_the_topics_alice_may_describe(appliance):
    topics = AdminClient(conf(appliance, AS_ALICE)).list_topics(timeout=10).topics
    assert "a" in topics and "b" not in topics


def test_alice_may_not_create_or_delete_topics(appliance):
    admin = AdminClient(conf(appliance, AS_ALICE))
    name = new_name("alice-made-")
    with pytest.raises(KafkaException) as created:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)
    assert created.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as deleted:
        admin.delete_topics(["a"])["a"].result(timeout=30)
    assert deleted.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_alice_may_not_describe_or_create_acls(appliance):
    admin = AdminClient(conf(appliance, AS_ALICE))
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka 2.16 reads DescribeAcls' top-level CLUSTER_AUTHORIZATION_FAILED but drops it
    # (an empty result); kafka-python below raises it. Either way nothing is revealed.
    assert admin.describe_acls(every).result(timeout=30) == []
    mine = AclBinding(ResourceType.TOPIC, "b", ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as created:
        admin.create_acls([mine])[mine].result(timeout=30)
    assert created.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    py_admin = KafkaAdminClient(**py_conf(appliance, AS_ALICE))
    with pytest.raises(kafka_errors.ClusterAuthorizationFailedError):
        py_admin.describe_acls(ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY,
                                         ResourcePatternFilter(PyResourceType.ANY, None,
                                                               ACLResourcePatternType.ANY)))
    py_admin.close()


def allow_alice(appliance, topic, op, *, permission=AclPermissionType.ALLOW,
                pattern=ResourcePatternType.LITERAL):
    admin = AdminClient(conf(appliance, ADMIN))
    acl = AclBinding(ResourceType.TOPIC, topic, pattern, "User:alice", "*", op, permission)
    admin.create_acls([acl])[acl].result(timeout=30)


def test_a_deny_beats_an_allow(appliance):
    topic = new_name("denied-")
    create_topic(appliance, topic, 1)
    allow_alice(appliance, topic, AclOperation.WRITE)
    assert produce(appliance, AS_ALICE, topic) == []
    allow_alice(appliance, topic, AclOperation.ALL, permission=AclPermissionType.DENY)
    assert set(produce(appliance, AS_ALICE, topic)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_a_prefixed_acl_covers_a_topic_created_later(appliance):
    prefix = new_name("pre") + "-"
    allow_alice(appliance, prefix, AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    topic = prefix + "later"
    create_topic(appliance, topic, 2)
    assert produce(appliance, AS_ALICE, topic) == []
    assert set(produce(appliance, AS_ALICE, "x" + topic)) == {
        KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_kafka_python_admin_creates_describes_and_deletes(appliance):
    admin = KafkaAdminClient(**py_conf(appliance, ADMIN))
    topic = new_name("py-")
    acl = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
              ResourcePattern(PyResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))
    assert admin.create_acls([acl])["failed"] == []
    found, _ = admin.describe_acls(ACLFilter(
        "User:alice", "*", ACLOperation.ANY, ACLPermissionType.ANY,
        ResourcePatternFilter(PyResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)))
    assert [(a.principal, a.operation) for a in found] == [("User:alice", ACLOperation.READ)]
    [(_, deleted, error)] = admin.delete_acls([ACLFilter(
        "User:alice", None, ACLOperation.ANY, ACLPermissionType.ANY,
        ResourcePatternFilter(PyResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))])
    assert error is kafka_errors.NoError and len(deleted) == 1
    admin.close()


def test_a_removed_acl_takes_effect_on_every_worker_within_a_second(appliance):
    topic = new_name("removed-")
    create_topic(appliance, topic, 2)
    allow_alice(appliance, topic, AclOperation.WRITE)
    # two partitions: one led by each worker
    producer = Producer({**conf(appliance, AS_ALICE), "enable.idempotence": False,
                         "message.timeout.ms": 5_000, "linger.ms": 0})
    outcomes: dict[int, list] = {0: [], 1: []}

    def send(partition):
        """The refusal comes back in the delivery report, or, once librdkafka's metadata has
        marked the topic unauthorized, from produce() itself."""
        try:
            producer.produce(topic, value=b"x", partition=partition,
                             on_delivery=lambda err, msg: outcomes[partition].append(err))
        except KafkaException as exc:
            outcomes[partition].append(exc.args[0])

    for partition in (0, 1):
        send(partition)
    producer.flush(20)
    assert outcomes == {0: [None], 1: [None]}
    admin = AdminClient(conf(appliance, ADMIN))
    gone = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                            "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.delete_acls([gone])[gone].result(timeout=30)) == 1
    removed_at = time.monotonic()
    refused = set()
    while time.monotonic() - removed_at < 1.0 and refused != {0, 1}:
        for partition in {0, 1} - refused:
            outcomes[partition].clear()
            send(partition)
        producer.flush(1)
        refused |= {p for p, errs in outcomes.items()
                    if errs and errs[-1] is not None
                    and errs[-1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert refused == {0, 1}, outcomes


def test_a_super_user_may_do_everything(appliance):
    admin = AdminClient(conf(appliance, ADMIN))
    topic = new_name("super-")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    assert produce(appliance, ADMIN, "b") == []
    assert consume_error(appliance, ADMIN, "b", "h") is None
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(every).result(timeout=30)
    assert {(b.name, b.operation) for b in described} >= {
        ("a", AclOperation.WRITE), ("a", AclOperation.READ), ("g", AclOperation.READ)}
    admin.delete_topics([topic])[topic].result(timeout=30)
    topics = admin.list_topics(timeout=10).topics
    assert "b" in topics and topic not in topics


def test_alice_reads_her_partitions_offsets_but_not_bs(appliance):
    consumer = Consumer({**conf(appliance, AS_ALICE), "group.id": "g"})
    low, high = consumer.get_watermark_offsets(TopicPartition("a", 0), timeout=10)
    assert high >= low >= 0
    consumer.close()
    # ListOffsets on b itself (librdkafka does not send it: b is not in alice's metadata)
    with klog_client.Admin(appliance.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism=AS_ALICE[0], sasl_plain_username=ALICE,
                           sasl_plain_password=ALICE_PASSWORD) as admin:
        answer = admin.request(list_offsets, replica_id=-1, isolation_level=0, topics=[
            list_offsets.ListOffsetsTopic(name="b", partitions=[
                list_offsets.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    assert answer.topics[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED


NOBODY = ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)  # a user with no ACL at all


def klog_admin(appliance, who):
    mechanism, user, password = who
    return klog_client.Admin(appliance.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism=mechanism, sasl_plain_username=user,
                             sasl_plain_password=password)


def test_an_idempotent_producer_needs_write_on_some_topic(appliance):
    # alice may write a: InitProducerId is granted; nobody may write anything: refused
    producer = Producer({**conf(appliance, AS_ALICE), "enable.idempotence": True})
    errors = []
    producer.produce("a", b"idempotent", on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(20) == 0 and errors == []
    with klog_admin(appliance, NOBODY) as admin:
        answer = admin.request(init_producer_id, transactional_id=None,
                               transaction_timeout_ms=60_000)
    assert answer.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_transactional_produce_needs_write_on_its_transactional_id(appliance):
    # alice may write a, but no TRANSACTIONAL_ID: Kafka refuses the whole request
    batch = build_batch([(0, None, b"t", ())], producer_id=1, producer_epoch=0,
                        base_sequence=0, is_transactional=True)
    with klog_admin(appliance, AS_ALICE) as admin:
        answer = admin.request(produce_api, transactional_id="alices-txn", acks=-1,
                               timeout_ms=10_000, topic_data=[produce_api.TopicProduceData(
                                   name="a", partition_data=[produce_api.PartitionProduceData(
                                       index=0, records=batch)])])
    assert answer.responses[0].partition_responses[0].error_code == \
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_only_a_broker_writes_transaction_markers(appliance):
    markers = [write_txn_markers.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[write_txn_markers.WritableTxnMarkerTopic(name="a", partition_indexes=[0])])]
    with klog_admin(appliance, AS_ALICE) as admin:
        refused = admin.request(write_txn_markers, markers=markers)
    assert refused.markers[0].topics[0].partitions[0].error_code == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with klog_admin(appliance, ADMIN) as admin:  # a super user has CLUSTER_ACTION
        allowed = admin.request(write_txn_markers, markers=markers)
    assert allowed.markers[0].topics[0].partitions[0].error_code in (
        0, KafkaError.NOT_LEADER_FOR_PARTITION)  # whichever worker was asked answers


def test_alice_may_not_alter_describe_configs_or_manage_groups(appliance):
    admin = KafkaAdminClient(**py_conf(appliance, AS_ALICE))
    with pytest.raises(kafka_errors.TopicAuthorizationFailedError):
        admin.create_partitions({"a": NewPartitions(4)})
    admin.close()
    confluent = AdminClient(conf(appliance, AS_ALICE))
    topic_a = ConfigResource(ConfigResource.Type.TOPIC, "a")
    with pytest.raises(KafkaException) as configs:
        confluent.describe_configs([topic_a])[topic_a].result(timeout=30)
    assert configs.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    groups = {g.group_id for g in confluent.list_consumer_groups().result(timeout=30).valid}
    assert "g" in groups and "h" not in groups  # h: the super user's group
    with pytest.raises(KafkaException) as described:
        confluent.describe_consumer_groups(["h"])["h"].result(timeout=30)
    assert described.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as deleted:
        confluent.delete_consumer_groups(["g"])["g"].result(timeout=30)
    assert deleted.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_a_replica_fetch_needs_cluster_action(appliance):
    fetch_a = [fetch.FetchTopic(topic="a", partitions=[fetch.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]
    with klog_admin(appliance, AS_ALICE) as admin:
        answer = admin.request(fetch, replica_id=1, max_wait_ms=0, min_bytes=1,
                               topics=fetch_a, forgotten_topics_data=[])
        as_consumer = admin.request(fetch, replica_id=-1, max_wait_ms=0, min_bytes=1,
                                    topics=fetch_a, forgotten_topics_data=[])
    assert answer.responses[0].partitions[0].error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert as_consumer.responses[0].partitions[0].error_code == 0
