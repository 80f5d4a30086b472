"""Three real appliances (two workers each) forming one cluster through a real three-server
ZooKeeper ensemble, used by real Kafka clients: every node answers for the whole fleet,
topics spread over the appliances, keyed messages keep their order."""

import collections
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import Appliance, require_binary

pytestmark = pytest.mark.interop

SESSION_MS = 6000


@pytest.fixture(scope="module")
def fleet(ensemble, tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    appliances = []
    try:
        for broker_id in (1, 2, 3):
            appliance = Appliance(root / f"a{broker_id}", log_dirs=2, settings={
                "broker.id": str(broker_id),
                "zookeeper.connect": f"{ensemble.connect}/klog-fleet",
                "zookeeper.session.timeout.ms": str(SESSION_MS),
                "broker.rack": f"rack-{broker_id}",
                "group.initial.rebalance.delay.ms": "0",
            })
            appliance.start(timeout_s=60)
            appliances.append(appliance)
        wait_for_brokers(appliances[0], 6)
        yield appliances
    finally:
        for appliance in appliances:
            appliance.stop()


def metadata(bootstrap: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(timeout=10)


def wait_for_brokers(appliance, count: int, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(metadata(appliance.bootstrap).brokers) == count:
            return
        time.sleep(0.2)
    raise AssertionError(f"Metadata never listed {count} brokers")


def node_addresses(appliances):
    return [f"127.0.0.1:{a.port + i}" for a in appliances for i in range(2)]


def test_every_node_lists_the_same_fleet(fleet):
    kcat = require_binary("kcat")
    views = set()
    for address in node_addresses(fleet):
        out = subprocess.run([kcat, "-L", "-b", address, "-J"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        import orjson
        raw = orjson.loads(out)
        views.add((tuple(sorted(b["id"] for b in raw["brokers"])),
                   tuple(sorted((t["topic"], len(t["partitions"])) for t in raw["topics"]))))
    assert len(views) == 1, views
    (brokers, _), = views
    assert brokers == (100, 101, 200, 201, 300, 301)


def test_a_topic_created_through_any_node_spreads_and_keeps_key_order(fleet):
    admin = AdminClient({"bootstrap.servers": fleet[1].bootstrap})
    admin.create_topics([NewTopic("fleet-keys", 12, 1)])["fleet-keys"].result(30)
    deadline = time.monotonic() + 30
    while True:
        topic = metadata(fleet[2].bootstrap).topics.get("fleet-keys")
        if topic is not None and len(topic.partitions) == 12 and all(
                p.leader >= 0 for p in topic.partitions.values()):
            break
        assert time.monotonic() < deadline, "partitions never got leaders"
        time.sleep(0.2)
    assert {p.leader // 100 for p in topic.partitions.values()} == {1, 2, 3}
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "linger.ms": 5,
                         "enable.idempotence": True})
    count = 100_000
    acked = []
    for i in range(count):
        key = f"user-{i % 500}".encode()
        producer.produce("fleet-keys", f"{i}".encode(), key,
                         on_delivery=lambda err, msg: acked.append(err is None))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == count and all(acked)
    consumer = Consumer({"bootstrap.servers": fleet[2].bootstrap, "group.id": "fleet-order",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["fleet-keys"])
    by_key = collections.defaultdict(list)
    seen = 0
    deadline = time.monotonic() + 120
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1):
            if message.error():
                continue
            by_key[message.key()].append(int(message.value()))
            seen += 1
    consumer.close()
    assert seen == count
    for values in by_key.values():
        assert values == sorted(values)  # per-key order kept
