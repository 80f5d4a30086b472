"""The issue-25 admin APIs under an authorizer, as Kafka's KafkaApis authorizes them (KIP-11
operations and resources): each is refused without its ACL with Kafka's error code and changes
nothing, and is accepted once the ACL is granted.

One appliance alone (one worker, SASL_PLAINTEXT, `AclAuthorizer`, `admin` a super user). Each
test has its own PLAIN user with no ACL at first, so a grant in one test (ALTER implies
DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS) cannot answer for another. confluent-kafka
sends the APIs it has (configs, DeleteRecords); klog's own codec sends the rest, so that the
exact codes Kafka answers are read."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient

import klog as klog_client
from appliance.security.acls import Operation
from klog.protocol.apis import alter_client_quotas as alter_quotas
from klog.protocol.apis import alter_partition_reassignments as alter_reassign
from klog.protocol.apis import (
    delete_records,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_producers,
    elect_leaders,
    incremental_alter_configs,
    list_partition_reassignments,
    offset_commit,
    offset_delete,
    offset_fetch,
)
from klog.protocol.apis import describe_client_quotas as describe_quotas
from tests.polling import wait_until
from tests.security.helpers import (
    PLAIN_USERS,
    confluent_conf,
    plain_jaas,
    python_conf,
    sasl_appliance,
)

# AlterConfigs (deprecated by confluent-kafka, still sent by tools) is checked on purpose
pytestmark = [pytest.mark.interop,
              pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")]
USERS = ("cfg", "brk", "del", "odel", "prod", "clus", "dirs", "elect", "reas", "quota", "ops")
PASSWORD = "admin-acl-secret"
ADMIN = ("admin", PLAIN_USERS["admin"])
TOPIC = "guarded"
CLUSTER_FAILED = KafkaError.CLUSTER_AUTHORIZATION_FAILED
TOPIC_FAILED = KafkaError.TOPIC_AUTHORIZATION_FAILED
GROUP_FAILED = KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    users = {**PLAIN_USERS, **{u: PASSWORD for u in USERS}}
    configured = sasl_appliance(tmp_path_factory.mktemp("admin_acls"), **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(users)})
    started = configured.start()
    admin = AdminClient(conf(started, *ADMIN))
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(timeout=30)
    producer = Producer({**conf(started, *ADMIN), "linger.ms": 0})
    for i in range(10):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(20) == 0
    yield started
    started.stop()


def conf(appliance, user: str, password: str = PASSWORD) -> dict:
    return confluent_conf(appliance.bootstrap, "PLAIN", user, password)


def codec(appliance, user: str, password: str = PASSWORD) -> klog_client.Admin:
    return klog_client.Admin(appliance.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username=user,
                             sasl_plain_password=password)


def kafka_python(appliance, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(**python_conf(appliance.bootstrap, "PLAIN", user, PASSWORD))


def ask(appliance, user: str, api, **fields):
    with codec(appliance, user, *([PLAIN_USERS["admin"]] if user == "admin" else [])) as c:
        return c.request(api, **fields)


def grant(appliance, user: str, resource: ResourceType, name: str,
          operation: AclOperation) -> None:
    acl = AclBinding(resource, name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                     operation, AclPermissionType.ALLOW)
    admin = AdminClient(conf(appliance, *ADMIN))  # kept alive until the answer
    admin.create_acls([acl])[acl].result(timeout=30)


def grant_cluster(appliance, user: str, operation: AclOperation) -> None:
    grant(appliance, user, ResourceType.BROKER, "kafka-cluster", operation)


def eventually(check, what: str):
    """ACLs reach the worker within a second (test_acls): poll the accepted call."""
    return wait_until(check, 10, what)


def failure_code(future) -> int:
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=30)
    return refused.value.args[0].code()


def accepted(future) -> bool:
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() in (TOPIC_FAILED, CLUSTER_FAILED):
            return False
        raise
    return True


def config_value(appliance, resource: ConfigResource, key: str) -> str | None:
    admin = AdminClient(conf(appliance, *ADMIN))  # kept alive until the answer
    entry = admin.describe_configs([resource])[resource].result(timeout=30).get(key)
    return None if entry is None else entry.value


def test_topic_configs_need_describe_and_alter_configs_on_the_topic(appliance):
    admin = AdminClient(conf(appliance, "cfg"))
    topic = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    before = config_value(appliance, topic, "retention.ms")
    assert failure_code(admin.describe_configs([topic])[topic]) == TOPIC_FAILED
    wanted = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    assert failure_code(admin.incremental_alter_configs([wanted])[wanted]) == TOPIC_FAILED
    replaced = ConfigResource(ConfigResource.Type.TOPIC, TOPIC,
                              set_config={"retention.ms": "654321"})
    assert failure_code(admin.alter_configs([replaced])[replaced]) == TOPIC_FAILED
    assert config_value(appliance, topic, "retention.ms") == before
    grant(appliance, "cfg", ResourceType.TOPIC, TOPIC, AclOperation.DESCRIBE_CONFIGS)
    eventually(lambda: accepted(admin.describe_configs([topic])[topic]), "DESCRIBE_CONFIGS")
    assert failure_code(admin.incremental_alter_configs([wanted])[wanted]) == TOPIC_FAILED
    grant(appliance, "cfg", ResourceType.TOPIC, TOPIC, AclOperation.ALTER_CONFIGS)
    eventually(lambda: accepted(admin.incremental_alter_configs([wanted])[wanted]),
               "ALTER_CONFIGS")
    assert config_value(appliance, topic, "retention.ms") == "123456"
    admin.alter_configs([replaced])[replaced].result(timeout=30)
    assert config_value(appliance, topic, "retention.ms") == "654321"


def test_broker_configs_need_describe_and_alter_configs_on_the_cluster(appliance):
    admin = AdminClient(conf(appliance, "brk"))
    node = str(ask(appliance, "admin", describe_cluster).brokers[0].broker_id)
    broker = ConfigResource(ConfigResource.Type.BROKER, node)
    before = config_value(appliance, broker, "log.retention.ms")
    assert failure_code(admin.describe_configs([broker])[broker]) == CLUSTER_FAILED
    loggers = ask(appliance, "brk", describe_configs, resources=[  # a broker's loggers
        describe_configs.DescribeConfigsResource(resource_type=8, resource_name=node,
                                                 configuration_keys=None)])
    assert loggers.results[0].error_code == CLUSTER_FAILED
    loggers = ask(appliance, "brk", incremental_alter_configs, validate_only=False, resources=[
        incremental_alter_configs.AlterConfigsResource(resource_type=8, resource_name=node,
                                                       configs=[])])
    assert loggers.responses[0].error_code == CLUSTER_FAILED
    wanted = ConfigResource(ConfigResource.Type.BROKER, node, incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000",
                    incremental_operation=AlterConfigOpType.SET)])
    assert failure_code(admin.incremental_alter_configs([wanted])[wanted]) == CLUSTER_FAILED
    replaced = ConfigResource(ConfigResource.Type.BROKER, node,
                              set_config={"log.retention.ms": "7200000"})
    assert failure_code(admin.alter_configs([replaced])[replaced]) == CLUSTER_FAILED
    assert config_value(appliance, broker, "log.retention.ms") == before
    grant_cluster(appliance, "brk", AclOperation.DESCRIBE_CONFIGS)
    eventually(lambda: accepted(admin.describe_configs([broker])[broker]), "DESCRIBE_CONFIGS")
    assert failure_code(admin.alter_configs([replaced])[replaced]) == CLUSTER_FAILED
    grant_cluster(appliance, "brk", AclOperation.ALTER_CONFIGS)
    eventually(lambda: accepted(admin.incremental_alter_configs([wanted])[wanted]),
               "ALTER_CONFIGS")
    assert config_value(appliance, broker, "log.retention.ms") == "7200000"


def low_watermark(appliance, partition: int) -> int:
    consumer = Consumer({**conf(appliance, *ADMIN), "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)[0]
    finally:
        consumer.close()


def test_delete_records_needs_delete_on_the_topic(appliance):
    admin = AdminClient(conf(appliance, "del"))
    assert low_watermark(appliance, 0) == 0
    # librdkafka finds the leader in Metadata first, which lists only the topics one may
    # DESCRIBE; DESCRIBE does not grant DELETE
    grant(appliance, "del", ResourceType.TOPIC, TOPIC, AclOperation.DESCRIBE)
    eventually(lambda: TOPIC in admin.list_topics(timeout=10).topics, "DESCRIBE on the topic")
    [refused] = admin.delete_records([TopicPartition(TOPIC, 0, 2)]).values()
    assert failure_code(refused) == TOPIC_FAILED
    unknown = ask(appliance, "del", delete_records, timeout_ms=10_000, topics=[
        delete_records.DeleteRecordsTopic(name="no-such-topic", partitions=[
            delete_records.DeleteRecordsPartition(partition_index=0, offset=1)])])
    assert unknown.topics[0].partitions[0].error_code == TOPIC_FAILED  # existence not revealed
    assert low_watermark(appliance, 0) == 0
    grant(appliance, "del", ResourceType.TOPIC, TOPIC, AclOperation.DELETE)
    eventually(lambda: accepted(next(iter(admin.delete_records(
        [TopicPartition(TOPIC, 0, 2)]).values()))), "DELETE on the topic")
    assert low_watermark(appliance, 0) == 2


def test_offset_delete_needs_delete_on_the_group_and_read_on_the_topic(appliance):
    group = "odel-group"
    ask(appliance, "admin", offset_commit, group_id=group, generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, retention_time_ms=-1, topics=[
            offset_commit.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                offset_commit.OffsetCommitRequestPartition(
                    partition_index=1, committed_offset=3, committed_metadata="")])])

    def committed():
        answer = ask(appliance, "admin", offset_fetch, group_id=group, topics=None)
        return {(t.name, p.partition_index): p.committed_offset
                for t in answer.topics for p in t.partitions if p.committed_offset >= 0}

    assert committed() == {(TOPIC, 1): 3}
    topics = [offset_delete.OffsetDeleteRequestTopic(name=TOPIC, partitions=[
        offset_delete.OffsetDeleteRequestPartition(partition_index=1)])]

    def delete():
        return ask(appliance, "odel", offset_delete, group_id=group, topics=topics)

    refused = delete()
    assert (refused.error_code, refused.topics) == (GROUP_FAILED, [])
    unknown_group = ask(appliance, "odel", offset_delete, group_id="no-such-group",
                        topics=topics)
    assert unknown_group.error_code == GROUP_FAILED  # existence not revealed
    grant(appliance, "odel", ResourceType.GROUP, group, AclOperation.DELETE)
    per_partition = eventually(lambda: (lambda a: a if a.error_code == 0 else None)(delete()),
                               "DELETE on the group")
    assert per_partition.topics[0].partitions[0].error_code == TOPIC_FAILED
    assert committed() == {(TOPIC, 1): 3}
    grant(appliance, "odel", ResourceType.TOPIC, TOPIC, AclOperation.READ)
    eventually(lambda: delete().topics[0].partitions[0].error_code == 0, "READ on the topic")
    assert committed() == {}


def test_describe_producers_needs_read_on_the_topic(appliance):
    def describe(topic=TOPIC):
        answer = ask(appliance, "prod", describe_producers, topics=[
            describe_producers.TopicRequest(name=topic, partition_indexes=[0, 1])])
        return [p.error_code for p in answer.topics[0].partitions]

    assert describe() == [TOPIC_FAILED, TOPIC_FAILED]
    assert describe("no-such-topic") == [TOPIC_FAILED, TOPIC_FAILED]  # existence not revealed
    grant(appliance, "prod", ResourceType.TOPIC, TOPIC, AclOperation.READ)
    eventually(lambda: describe() == [0, 0], "READ on the topic")


def test_describe_cluster_shows_authorized_operations_only_with_describe(appliance):
    def describe(include=True):
        return ask(appliance, "clus", describe_cluster,
                   include_cluster_authorized_operations=include)

    answer = describe()  # Kafka answers everyone; the operations need DESCRIBE
    assert answer.error_code == 0 and answer.brokers
    assert answer.cluster_authorized_operations == 0
    assert describe(False).cluster_authorized_operations == -2147483648
    py_admin = kafka_python(appliance, "clus")  # kafka-python asks for the operations
    assert py_admin.describe_cluster()["authorized_operations"] == []
    grant_cluster(appliance, "clus", AclOperation.DESCRIBE)
    ops = eventually(lambda: describe().cluster_authorized_operations, "DESCRIBE")
    assert ops == 1 << Operation.DESCRIBE
    assert py_admin.describe_cluster()["authorized_operations"] == ["DESCRIBE"]
    py_admin.close()
    assert ask(appliance, "admin", describe_cluster,
               include_cluster_authorized_operations=True).cluster_authorized_operations == sum(
        1 << op for op in (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE))


def test_describe_log_dirs_needs_describe_on_the_cluster(appliance):
    def describe():
        return ask(appliance, "dirs", describe_log_dirs, topics=None)

    refused = describe()
    assert (refused.error_code, refused.results) == (CLUSTER_FAILED, [])
    grant_cluster(appliance, "dirs", AclOperation.DESCRIBE)
    answer = eventually(lambda: (lambda a: a if a.error_code == 0 else None)(describe()),
                        "DESCRIBE on the cluster")
    assert any(t.name == TOPIC for r in answer.results for t in r.topics)


def test_elect_leaders_needs_alter_on_the_cluster(appliance):
    def elect():
        answer = ask(appliance, "elect", elect_leaders, election_type=0, timeout_ms=10_000,
                     topic_partitions=[elect_leaders.TopicPartitions(topic=TOPIC,
                                                                     partitions=[0])])
        return answer.error_code, answer.replica_election_results[0].partition_result[0]

    top, partition = elect()
    assert (top, partition.error_code) == (CLUSTER_FAILED, CLUSTER_FAILED)
    grant_cluster(appliance, "elect", AclOperation.DESCRIBE)  # not enough
    assert elect()[0] == CLUSTER_FAILED
    grant_cluster(appliance, "elect", AclOperation.ALTER)
    top, partition = eventually(lambda: (lambda a: a if a[0] == 0 else None)(elect()),
                                "ALTER on the cluster")
    # a one-node cluster's leader is its preferred one already
    assert partition.error_code in (0, KafkaError.ELECTION_NOT_NEEDED)


def test_partition_reassignments_need_describe_and_alter_on_the_cluster(appliance):
    def listed():
        return ask(appliance, "reas", list_partition_reassignments, timeout_ms=10_000,
                   topics=[list_partition_reassignments.ListPartitionReassignmentsTopics(
                       name=TOPIC, partition_indexes=[0, 1])])

    [node] = [b.broker_id for b in ask(appliance, "admin", describe_cluster).brokers]

    def alter():
        return ask(appliance, "reas", alter_reassign, timeout_ms=10_000, topics=[
            alter_reassign.ReassignableTopic(name=TOPIC, partitions=[
                alter_reassign.ReassignablePartition(partition_index=0, replicas=[node])])])

    py_admin = kafka_python(appliance, "reas")
    with pytest.raises(kafka_errors.ClusterAuthorizationFailedError):
        py_admin.list_partition_reassignments()
    py_admin.close()
    refused_list = listed()  # Kafka lists the partitions asked for, with no replicas
    assert refused_list.error_code == CLUSTER_FAILED
    assert [(t.name, p.partition_index, p.replicas) for t in refused_list.topics
            for p in t.partitions] == [(TOPIC, 0, []), (TOPIC, 1, [])]
    refused = alter()
    assert refused.error_code == CLUSTER_FAILED
    assert [p.error_code for t in refused.responses for p in t.partitions] == [CLUSTER_FAILED]
    grant_cluster(appliance, "reas", AclOperation.DESCRIBE)
    eventually(lambda: listed().error_code == 0, "DESCRIBE on the cluster")
    assert listed().topics == []  # alone nothing moves
    assert alter().error_code == CLUSTER_FAILED
    grant_cluster(appliance, "reas", AclOperation.ALTER)
    answer = eventually(lambda: (lambda a: a if a.error_code == 0 else None)(alter()),
                        "ALTER on the cluster")
    assert [p.error_code for t in answer.responses for p in t.partitions] == [0]


def test_client_quotas_need_describe_and_alter_configs_on_the_cluster(appliance):
    entry = alter_quotas.RequestEntry(
        entity=[alter_quotas.EntityData(entity_type="client-id", entity_name="guarded-app")],
        ops=[alter_quotas.OpData(key="producer_byte_rate", value=1_048_576.0, remove=False)])

    def alter():
        answer = ask(appliance, "quota", alter_quotas, entries=[entry], validate_only=False)
        return [e.error_code for e in answer.entries]

    def described(user):
        return ask(appliance, user, describe_quotas, strict=False, components=[
            describe_quotas.ComponentData(entity_type="client-id", match_type=0,
                                          match="guarded-app")])

    assert described("quota").error_code == CLUSTER_FAILED
    assert alter() == [CLUSTER_FAILED]
    assert described("admin").entries == []
    grant_cluster(appliance, "quota", AclOperation.DESCRIBE_CONFIGS)
    eventually(lambda: described("quota").error_code == 0, "DESCRIBE_CONFIGS on the cluster")
    assert alter() == [CLUSTER_FAILED]
    grant_cluster(appliance, "quota", AclOperation.ALTER_CONFIGS)
    eventually(lambda: alter() == [0], "ALTER_CONFIGS on the cluster")
    [shown] = described("admin").entries
    assert {v.key: v.value for v in shown.values} == {"producer_byte_rate": 1_048_576.0}


def test_metadata_and_describe_groups_answer_authorized_operations(appliance):
    """librdkafka's describe_cluster/describe_topics/describe_consumer_groups with
    include_authorized_operations read them from Metadata v8 and DescribeGroups v3+."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection

    admin = AdminClient(conf(appliance, "ops"))
    grant(appliance, "ops", ResourceType.TOPIC, TOPIC, AclOperation.READ)
    topics = TopicCollection([TOPIC])

    def topic_operations():
        described = admin.describe_topics(topics, include_authorized_operations=True)
        try:
            return described[TOPIC].result(timeout=30).authorized_operations
        except KafkaException:
            return None
    # READ implies DESCRIBE (Kafka's rule), so the topic is seen with exactly those two
    assert {op.name for op in eventually(topic_operations, "READ on the topic")} == {
        "READ", "DESCRIBE"}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
    assert not cluster.authorized_operations, "no DESCRIBE on the cluster: none shown"
    grant_cluster(appliance, "ops", AclOperation.DESCRIBE)
    grant_cluster(appliance, "ops", AclOperation.IDEMPOTENT_WRITE)

    def cluster_operations():
        answer = admin.describe_cluster(include_authorized_operations=True).result(timeout=30)
        return {op.name for op in answer.authorized_operations or []}
    wait_until(lambda: cluster_operations() == {"DESCRIBE", "IDEMPOTENT_WRITE"}, 10,
               "the cluster's operations")
    group = "ops-group"
    grant(appliance, "ops", ResourceType.GROUP, group, AclOperation.READ)
    offsets = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0, 1)])
    eventually(lambda: accepted(admin.alter_consumer_group_offsets([offsets])[group]),
               "READ on the group")
    described = admin.describe_consumer_groups(
        [group], include_authorized_operations=True)[group].result(timeout=30)
    assert {op.name for op in described.authorized_operations} == {"READ", "DESCRIBE"}
