"""Client quotas in a fleet (two appliances of one worker each, on a real ZooKeeper): a quota
set through one appliance is described by the other and sits where Kafka keeps it
(/config/clients/<client-id>, /config/users/<user>/clients/<default>); a consumer_byte_rate
default for every client id does not slow replication (followers' fetches are exempt): an
acks=all producer to a topic of two replicas keeps writing."""

from __future__ import annotations

import orjson
import pytest
from confluent_kafka.admin import AdminClient

import klog
from klog.protocol.apis import alter_client_quotas as alter
from klog.protocol.apis import describe_client_quotas as describe
from tests.fleet.harness import AckedWriter, FleetSpec, wait_for_brokers
from tests.polling import wait_until

pytestmark = pytest.mark.interop

FLEET = FleetSpec("/klog-quotas", broker_ids=(1, 2), log_dirs=1)
TOPIC, PARTITIONS = "quoted", 2


def _alter(bootstrap, pairs, key, value):
    with klog.Admin(bootstrap) as admin:
        answer = admin.request(alter, validate_only=False, entries=[alter.RequestEntry(
            entity=[alter.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
            ops=[alter.OpData(key=key, value=float(value or 0), remove=value is None)])])
    return [e.error_code for e in answer.entries]


def _described(bootstrap):
    with klog.Admin(bootstrap) as admin:
        answer = admin.request(describe, components=[], strict=False)
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in answer.entries}


def test_a_quota_reaches_the_other_appliance_and_zookeeper(fleet, zk):
    for appliance in fleet:
        wait_for_brokers(appliance, 2)
    assert _alter(fleet[0].bootstrap, [("client-id", "c1")], "producer_byte_rate",
                  1_048_576) == [0]
    assert _alter(fleet[0].bootstrap, [("user", "alice"), ("client-id", None)],
                  "request_percentage", 25.5) == [0]
    expected = {(("client-id", "c1"),): {"producer_byte_rate": 1_048_576.0},
                (("client-id", None), ("user", "alice")): {"request_percentage": 25.5}}
    wait_until(lambda: _described(fleet[1].bootstrap) == expected, 30,
               "the second appliance to describe the quotas")
    data, _ = zk.get("/config/clients/c1")
    assert orjson.loads(data)["config"] == {"producer_byte_rate": "1048576"}
    data, _ = zk.get("/config/users/alice/clients/<default>")
    assert orjson.loads(data)["config"] == {"request_percentage": "25.5"}


def test_replication_is_exempt(fleet):
    with klog.Admin(fleet[0].bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS, replication_factor=2)
    # every client id, the followers' fetchers too, at 100 bytes/s of fetch
    assert _alter(fleet[0].bootstrap, [("client-id", None)], "consumer_byte_rate", 100) == [0]
    wait_until(lambda: (("client-id", None),) in _described(fleet[1].bootstrap), 30,
               "the default quota everywhere")
    writer = AckedWriter(fleet[1].bootstrap, TOPIC, PARTITIONS).start()
    # acks=all answered for far more than 100 bytes/s lets through (the writer ran a fixed
    # 8 s before: no ISR could shrink in that time under the default 30 s lag either)
    wait_until(lambda: len(writer.acked) > 5000, 60, "5000 records acknowledged by acks=all")
    writer.stop()
    assert writer.errors == []
    # acks=all answered and no follower left the ISR: they kept up, far above 100 bytes/s
    assert len(writer.acked) > 5000, len(writer.acked)
    described = AdminClient({"bootstrap.servers": fleet[0].bootstrap}).list_topics(
        TOPIC, timeout=10).topics[TOPIC]
    assert [len(p.isrs) for p in described.partitions.values()] == [2] * PARTITIONS
    assert _alter(fleet[0].bootstrap, [("client-id", None)], "consumer_byte_rate", None) == [0]
