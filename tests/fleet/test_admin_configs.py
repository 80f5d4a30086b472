"""AlterConfigs and IncrementalAlterConfigs in a fleet (two appliances, two workers each, on a
real ZooKeeper ensemble): confluent-kafka's and kafka-python's admin clients alter a topic's
retention.ms and every node reads it back, also after an appliance restarts, while an acks=all
producer writes throughout without an error; the brokers' dynamic default reaches every node;
ZooKeeper holds Kafka's znodes (/config/topics/<t>, /config/brokers/<default>, a change
notification); a refusal changes nothing anywhere."""

from __future__ import annotations

import orjson
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

import klog
from klog.protocol.apis import incremental_alter_configs as api
from tests.fleet.harness import AckedWriter, FleetSpec, wait_for_brokers
from tests.polling import wait_until

pytestmark = pytest.mark.interop

FLEET = FleetSpec("/klog-configs", broker_ids=(1, 2))
TOPIC, PARTITIONS = "configured", 4


def _nodes(fleet):
    return [f"127.0.0.1:{a.port + i}" for a in fleet for i in range(2)]


def _retention_everywhere(fleet, topic=TOPIC):
    values = set()
    for address in _nodes(fleet):
        with klog.Admin(address) as one:
            values.add(one.topic_configs(topic)["retention.ms"])
    return values


def _set(admin, resource_type, name, key, value):
    resource = ConfigResource(resource_type, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    (future,) = admin.incremental_alter_configs([resource]).values()
    return future.result(30)


@pytest.fixture(scope="module")
def writer(fleet):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    (future,) = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2)]).values()
    future.result(60)
    started = AckedWriter(fleet[1].bootstrap, TOPIC, PARTITIONS).start()
    yield started
    started.stop()
    assert started.errors == []
    assert len(started.acked) + len(started.acked_without_offset) > 0


def test_confluent_alter_reaches_every_node_and_zookeeper(fleet, zk, writer):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    _set(admin, "topic", TOPIC, "retention.ms", "123456")
    wait_until(lambda: _retention_everywhere(fleet) == {"123456"}, 30,
               "every node to read retention.ms=123456")
    data, _ = zk.get(f"/config/topics/{TOPIC}")
    assert orjson.loads(data)["config"] == {"retention.ms": "123456"}
    assert zk.get_children("/config/changes")
    other = AdminClient({"bootstrap.servers": fleet[1].bootstrap})
    (future,) = other.describe_configs([ConfigResource("topic", TOPIC)]).values()
    entry = future.result(30)["retention.ms"]
    assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_kafka_python_alter_reaches_every_node(fleet, writer):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=fleet[1].bootstrap)
    try:
        client.alter_configs([KConfigResource(ConfigResourceType.TOPIC, TOPIC,
                                              configs={"retention.ms": "654321"})])
    finally:
        client.close()
    wait_until(lambda: _retention_everywhere(fleet) == {"654321"}, 30,
               "every node to read retention.ms=654321")


def test_a_refusal_changes_nothing_anywhere(fleet, writer):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    with pytest.raises(KafkaException) as refused:
        _set(admin, "topic", TOPIC, "retention.ms", "forever")
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert "retention.ms" in refused.value.args[0].str()
    with pytest.raises(KafkaException) as unknown:
        _set(admin, "topic", "no-such-topic", "retention.ms", "1")
    assert unknown.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    assert _retention_everywhere(fleet) == {"654321"}


def test_the_brokers_default_reaches_every_node(fleet, zk, writer):
    entries = [api.AlterableConfig(name="log.cleaner.backoff.ms", value="2500",
                                   config_operation=0)]
    with klog.Admin(fleet[1].bootstrap) as one:
        answer = one.request(api, resources=[api.AlterConfigsResource(
            resource_type=4, resource_name="", configs=entries)], validate_only=False)
    assert answer.responses[0].error_code == 0
    data, _ = zk.get("/config/brokers/<default>")
    assert orjson.loads(data)["config"] == {"log.cleaner.backoff.ms": "2500"}

    def everywhere():
        values = set()
        for node_id, address in zip((100, 101, 200, 201), _nodes(fleet), strict=True):
            admin = AdminClient({"bootstrap.servers": address})
            (future,) = admin.describe_configs([ConfigResource("broker",
                                                               str(node_id))]).values()
            entry = future.result(30)["log.cleaner.backoff.ms"]
            values.add((entry.value, entry.source))
        return values
    wait_until(lambda: everywhere() == {
        ("2500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}, 30,
        "every node to report log.cleaner.backoff.ms=2500 from the dynamic default")


def test_a_nodes_own_config_is_that_nodes(fleet, zk, writer):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    _set(admin, "broker", "200", "log.cleaner.backoff.ms", "700")  # sent to node 200
    assert orjson.loads(zk.get("/config/brokers/200")[0])["config"] == {
        "log.cleaner.backoff.ms": "700"}

    def backoff(node_id):
        (future,) = admin.describe_configs([ConfigResource("broker", str(node_id))]).values()
        entry = future.result(30)["log.cleaner.backoff.ms"]
        return entry.value, entry.source
    assert backoff(200) == ("700", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert backoff(201) == ("2500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


def test_a_restarted_appliance_keeps_the_configs(fleet, writer):
    fleet[1].stop()
    fleet[1].start(timeout_s=60)
    wait_for_brokers(fleet[0], 4, 60)
    wait_until(lambda: _retention_everywhere(fleet) == {"654321"}, 60,
               "every node, the restarted ones too, to read retention.ms=654321")
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    (future,) = admin.describe_configs([ConfigResource("broker", "200")]).values()
    assert future.result(30)["log.cleaner.backoff.ms"].value == "700"


def test_the_fleet_store_spreads_other_entity_types(fleet, ensemble, zk):
    """What the quotas build on: a store's change reaches another appliance's store through
    Kafka's change notification; a user's SCRAM credentials in the same znode stay."""
    from cluster.config_store import FleetConfigStore
    from cluster.session import Session

    def session():
        started = Session(f"{ensemble.connect}{FLEET.chroot}", session_timeout_ms=6000,
                          connection_timeout_ms=5000)
        started.start()
        return started

    zk.ensure_path("/config/users")
    zk.create("/config/users/bob", orjson.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": "salt=c2FsdA==,stored_key=a,server_key=b,"
                                                   "iterations=4096"}}))
    one, two = session(), session()
    writer, follower = FleetConfigStore(one), FleetConfigStore(two)
    try:
        writer.start()
        follower.start()
        writer.alter("users", "bob", {"producer_byte_rate": "1024"})
        writer.alter("users/bob/clients", "app 1", {"consumer_byte_rate": "2048"})
        writer.alter("clients", "<default>", {"request_percentage": "50"})
        # the three notifications are followed in order: wait for the last one too
        wait_until(lambda: follower.entities().get("users", {}).get("bob") == {
            "producer_byte_rate": "1024"} and follower.entities().get(
            "users/bob/clients", {}).get("app 1") == {"consumer_byte_rate": "2048"}
            and "<default>" in follower.entities().get("clients", {}), 30,
            "the other store to follow the change notification")
        assert follower.entities()["clients"] == {"<default>": {"request_percentage": "50"}}
        config = orjson.loads(zk.get("/config/users/bob")[0])["config"]
        assert "SCRAM-SHA-256" in config and config["producer_byte_rate"] == "1024"
        assert zk.exists("/config/users/bob/clients/app%201")
        writer.alter("users", "bob", {"producer_byte_rate": None})
        wait_until(lambda: "bob" not in follower.entities().get("users", {}), 30,
                   "the removal to reach the other store")
        assert "SCRAM-SHA-256" in orjson.loads(zk.get("/config/users/bob")[0])["config"]
    finally:
        writer.stop()
        follower.stop()
        one.stop()
        two.stop()
