"""AlterConfigs and IncrementalAlterConfigs on an appliance alone, with confluent-kafka's and
kafka-python's admin clients: a topic's retention.ms altered and read back from every worker
and after a restart while a producer writes throughout; brokers' dynamic keys with their
sources; Kafka's refusals (the key named, nothing changed); validate_only; a live log that
takes a new segment size at once."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

import klog
from klog.admin import EARLIEST
from klog.protocol.apis import incremental_alter_configs as api
from klog.protocol.error_codes import ErrorCode
from tests.conftest import running_appliance
from tests.polling import wait_until

WORKERS = 2


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    with running_appliance(tmp_path_factory.mktemp("configs"), log_dirs=WORKERS,
                           settings={"log.retention.check.interval.ms": "200"}) as started:
        yield started


@pytest.fixture(scope="module")
def admin(appliance):
    return AdminClient({"bootstrap.servers": appliance.bootstrap})


def _topic(admin, name, partitions=WORKERS, **configs):
    (future,) = admin.create_topics([NewTopic(name, partitions, 1, config=configs)]).values()
    future.result(30)
    return name


def _incremental(admin, resource_type, name, ops, validate_only=False):
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    (future,) = admin.incremental_alter_configs([resource],
                                                validate_only=validate_only).values()
    return future.result(30)


class Refused(Exception):
    """A resource's error as klog's admin read it: (code name, message)."""


def _default_broker(appliance, ops, validate_only=False, name=""):
    """IncrementalAlterConfigs on the brokers' default entity (resource name ""), which
    confluent-kafka cannot name: klog's admin sends it (to worker 0)."""
    entries = [api.AlterableConfig(name=k, value=v, config_operation=int(op.value))
               for k, v, op in ops]
    with klog.Admin(appliance.bootstrap) as one:
        answer = one.request(api, resources=[api.AlterConfigsResource(
            resource_type=4, resource_name=name, configs=entries)], validate_only=validate_only)
    (result,) = answer.responses
    if result.error_code:
        raise Refused(ErrorCode(result.error_code).name, result.error_message)


def _described(admin, resource_type, name):
    (future,) = admin.describe_configs([ConfigResource(resource_type, name)]).values()
    return future.result(30)


def _every_worker(appliance, topic):
    """The topic's configs as each worker answers them (klog's admin asks its bootstrap)."""
    answers = []
    for index in range(WORKERS):
        with klog.Admin(f"{appliance.host}:{appliance.port + index}") as one:
            answers.append(one.topic_configs(topic))
    return answers


class Writer:
    """A producer writing throughout; every delivery error is kept."""

    def __init__(self, bootstrap, topic):
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.errors, self.delivered = topic, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.delivered += 1

    def _run(self):
        i = 0
        while not self._stop.is_set():
            self.producer.produce(self.topic, str(i).encode(), on_delivery=self._done)
            self.producer.poll(0.005)
            i += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0


def test_confluent_alters_retention_every_worker_reads_it(appliance, admin):
    topic = _topic(admin, "retained")
    with Writer(appliance.bootstrap, topic) as writer:
        _incremental(admin, "topic", topic, [("retention.ms", "123456", AlterConfigOpType.SET)])
        described = _described(admin, "topic", topic)
        assert described["retention.ms"].value == "123456"
        assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert described["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert all(c["retention.ms"] == "123456" for c in _every_worker(appliance, topic))
        # DELETE: back to the broker's value
        _incremental(admin, "topic", topic, [("retention.ms", None, AlterConfigOpType.DELETE)])
        assert all(c["retention.ms"] == "604800000" for c in _every_worker(appliance, topic))
        time.sleep(0.2)
    assert writer.errors == [] and writer.delivered > 0


def test_kafka_python_alters_and_reads_back(appliance, admin):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    topic = _topic(admin, "kp-retained")
    client = KafkaAdminClient(bootstrap_servers=appliance.bootstrap)
    try:
        for incremental in (False, True):
            value = "777000" if incremental else "654321"
            client.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"retention.ms": value})],
                                 incremental=incremental)
            assert all(c["retention.ms"] == value for c in _every_worker(appliance, topic))
        answer = client.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])
        assert "777000" in str(answer)
    finally:
        client.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # still what older tools send
def test_alter_configs_replaces_the_whole_set(appliance, admin):
    topic = _topic(admin, "replaced", **{"cleanup.policy": "compact", "retention.ms": "1000"})
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "2000"})
    (future,) = admin.alter_configs([resource]).values()
    future.result(30)
    described = _described(admin, "topic", topic)
    assert described["retention.ms"].value == "2000"
    assert described["cleanup.policy"].value == "delete"  # not named: back to the default


def test_append_and_subtract_a_list_key(appliance, admin):
    topic = _topic(admin, "listed")
    _incremental(admin, "topic", topic, [
        ("leader.replication.throttled.replicas", "0:100", AlterConfigOpType.APPEND)])
    throttled = _described(admin, "topic", topic)["leader.replication.throttled.replicas"]
    assert (throttled.value, throttled.source) == ("0:100",
                                                   ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    _incremental(admin, "topic", topic, [("cleanup.policy", "compact", AlterConfigOpType.APPEND)])
    assert _described(admin, "topic", topic)["cleanup.policy"].value == "delete,compact"
    _incremental(admin, "topic", topic,
                 [("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT)])
    assert _described(admin, "topic", topic)["cleanup.policy"].value == "compact"


@pytest.mark.parametrize("ops, code, named", [
    ([("retention.mss", "1", AlterConfigOpType.SET)], "INVALID_CONFIG", "retention.mss"),
    ([("retention.ms", "soon", AlterConfigOpType.SET)], "INVALID_CONFIG", "retention.ms"),
    ([("segment.bytes", "10", AlterConfigOpType.SET)], "INVALID_CONFIG", "segment.bytes"),
    ([("cleanup.policy", "shrink", AlterConfigOpType.SET)], "INVALID_CONFIG",
     "cleanup.policy"),
    ([("retention.ms", "5", AlterConfigOpType.APPEND)], "INVALID_REQUEST", "retention.ms"),
    ([("retention.ms", "5", AlterConfigOpType.SET), ("segment.bytes", "x",
                                                      AlterConfigOpType.SET)],
     "INVALID_CONFIG", "segment.bytes"),
])
def test_bad_topic_configs_are_refused_and_nothing_changes(admin, ops, code, named):
    topic = "refused"
    if topic not in admin.list_topics(timeout=10).topics:
        _topic(admin, topic, **{"retention.ms": "99"})
    with pytest.raises(KafkaException) as refused:
        _incremental(admin, "topic", topic, ops)
    assert refused.value.args[0].name() == code
    assert named in refused.value.args[0].str()
    assert _described(admin, "topic", topic)["retention.ms"].value == "99"


def test_unknown_topic_and_validate_only(admin):
    with pytest.raises(KafkaException) as refused:
        _incremental(admin, "topic", "no-such-topic",
                     [("retention.ms", "1", AlterConfigOpType.SET)])
    assert refused.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
    topic = _topic(admin, "validated")
    _incremental(admin, "topic", topic, [("retention.ms", "5", AlterConfigOpType.SET)],
                 validate_only=True)
    assert _described(admin, "topic", topic)["retention.ms"].value == "604800000"
    with pytest.raises(KafkaException):
        _incremental(admin, "topic", topic, [("retention.ms", "x", AlterConfigOpType.SET)],
                     validate_only=True)


def test_a_live_log_takes_a_new_segment_size(appliance, admin):
    topic = _topic(admin, "rolled", partitions=1)
    _incremental(admin, "topic", topic, [("segment.bytes", "2048", AlterConfigOpType.SET)])
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 0})
    for _ in range(40):
        producer.produce(topic, b"x" * 200, partition=0)
        producer.flush(10)
    segments = list(appliance.log_dirs[0].glob(f"{topic}-0/*.log")) + list(
        appliance.log_dirs[1].glob(f"{topic}-0/*.log"))
    assert len(segments) > 2


def test_a_live_log_takes_a_new_retention(appliance, admin):
    topic = _topic(admin, "expiring", partitions=1, **{"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": appliance.bootstrap, "linger.ms": 0})
    for _ in range(30):
        producer.produce(topic, b"x" * 200, partition=0)
        producer.flush(10)
    with klog.Admin(appliance.bootstrap) as one:
        assert one.list_offsets(topic, EARLIEST)[0] == 0
        _incremental(admin, "topic", topic, [("retention.ms", "1", AlterConfigOpType.SET)])
        wait_until(lambda: one.list_offsets(topic, EARLIEST)[0] > 0, 30,
                   "retention to delete the old segments under retention.ms=1")


def test_broker_dynamic_keys_and_their_sources(appliance, admin):
    topic = _topic(admin, "inherits")
    _default_broker(appliance, [
        ("log.retention.ms", "3600000", AlterConfigOpType.SET),
        ("log.cleaner.io.max.bytes.per.second", "1048576", AlterConfigOpType.SET)])
    broker = _described(admin, "broker", "0")
    assert broker["log.retention.ms"].value == "3600000"
    assert broker["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert broker["log.cleaner.io.max.bytes.per.second"].value == "1048576.0"
    assert broker["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker["log.cleaner.threads"].source == ConfigSource.DEFAULT_CONFIG.value
    described = _described(admin, "topic", topic)
    assert described["retention.ms"].value == "3600000"
    assert described["retention.ms"].source == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert all(c["retention.ms"] == "3600000" for c in _every_worker(appliance, topic))
    # the node's own entity wins over the default (node 0 is worker 0)
    _incremental(admin, "broker", "0", [("log.retention.ms", "7200000",
                                         AlterConfigOpType.SET)])
    broker = _described(admin, "broker", "0")
    assert broker["log.retention.ms"].value == "7200000"
    assert broker["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value


@pytest.mark.parametrize("name, ops, code, named", [
    ("", [("broker.id", "7", AlterConfigOpType.SET)], "INVALID_CONFIG", "broker.id"),
    ("0", [("log.retention.ms", "x", AlterConfigOpType.SET)], "INVALID_CONFIG",
     "log.retention.ms"),
    ("99", [("log.retention.ms", "1", AlterConfigOpType.SET)], "INVALID_REQUEST", "broker"),
    ("", [("log.retention.mss", "7", AlterConfigOpType.SET)], "INVALID_CONFIG",
     "log.retention.mss"),
    ("", [("log.retention.ms", "-7", AlterConfigOpType.SET)], "INVALID_CONFIG",
     "log.retention.ms"),
    ("", [("log.cleaner.io.max.bytes.per.second", "0", AlterConfigOpType.SET)],
     "INVALID_CONFIG", "log.cleaner.io.max.bytes.per.second"),
])
def test_bad_broker_configs_are_refused(appliance, admin, name, ops, code, named):
    before = _described(admin, "broker", "0")["log.retention.ms"].value
    if name == "0":
        with pytest.raises(KafkaException) as refused:
            _incremental(admin, "broker", name, ops)
        assert refused.value.args[0].name() == code
        assert named in refused.value.args[0].str()
    else:
        with pytest.raises(Refused) as refused:
            _default_broker(appliance, ops, name=name)
        assert refused.value.args[0] == code
        assert named in refused.value.args[1]
    assert _described(admin, "broker", "0")["log.retention.ms"].value == before


def test_a_restart_keeps_what_was_altered(appliance, admin):
    topic = _topic(admin, "kept")
    _incremental(admin, "topic", topic, [("retention.ms", "424242", AlterConfigOpType.SET)])
    _default_broker(appliance, [("log.cleaner.backoff.ms", "1234", AlterConfigOpType.SET)])
    appliance.stop()
    appliance.start()
    again = AdminClient({"bootstrap.servers": appliance.bootstrap})
    wait_until(lambda: topic in again.list_topics(timeout=10).topics, 30, "the topic")
    assert all(c["retention.ms"] == "424242" for c in _every_worker(appliance, topic))
    broker = _described(again, "broker", "0")
    assert broker["log.cleaner.backoff.ms"].value == "1234"
    assert broker["log.cleaner.backoff.ms"].source == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
