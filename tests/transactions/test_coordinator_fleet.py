"""The transaction coordinator in a fleet of three appliances (a real ZooKeeper ensemble):
``__transaction_state`` has three replicas and ``min.insync.replicas`` =
``transaction.state.log.min.isr``; kill -9 of the coordinator's appliance moves its ids to the
new leader of their partition, which reloads them: the same producer id and epoch, an open
transaction still open, one in PrepareCommit completed (CompleteCommit once leaders serve
WriteTxnMarkers, after the partition side's merge; until then it stays in PrepareCommit with
its markers retried)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from appliance.workers.transactions.txn_log import TRANSACTION_TOPIC
from klog.protocol.apis import find_coordinator
from klog.protocol.error_codes import ErrorCode
from tests.fleet.conftest import ensemble, fleet, zk  # noqa: F401 (the fleet's fixtures)
from tests.fleet.harness import FleetSpec, appliance_of, kill_appliance, led, partition_state
from tests.polling import wait_until
from tests.transactions.coordinator_helpers import add_partitions, describe, end, init
from tests.worker.raw import RawClient

pytestmark = pytest.mark.interop

TOPIC = "txn-fleet"
FLEET = FleetSpec("/klog-txn-coordinator", log_dirs=1, settings={
    "transaction.state.log.num.partitions": "2", "default.replication.factor": "3",
    "replica.lag.time.max.ms": "5000"})


def coordinator_of(port: int, transactional_id: str):
    client = RawClient(port)
    try:
        answer = client.call(find_coordinator, 2, key=transactional_id, key_type=1)
    finally:
        client.close()
    return answer.error_code == 0 and answer


def test_ids_survive_the_coordinators_appliance(fleet, zk):  # noqa: F811
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 3)])[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, 2), 30, "leaders")
    found = wait_until(lambda: coordinator_of(fleet[1].port, "tx-fleet"), 30,
                       "a transaction coordinator")
    for partition in range(2):
        state = partition_state(zk, TRANSACTION_TOPIC, partition)
        assert len({r // 100 for r in state["isr"]}) == 3, state
    resource = ConfigResource(ConfigResource.Type.TOPIC, TRANSACTION_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["min.insync.replicas"].value == "2"

    client = RawClient(found.port, timeout_s=30)
    wait_until(lambda: init(client, "tx-fleet").error_code == 0, 30, "InitProducerId")
    pid = describe(client, "tx-fleet")
    assert add_partitions(client, "tx-fleet", pid.producer_id, pid.producer_epoch,
                          {TOPIC: [0, 1]}) == {(TOPIC, 0): ErrorCode.NONE,
                                               (TOPIC, 1): ErrorCode.NONE}
    assert end(client, "tx-fleet", pid.producer_id, pid.producer_epoch, True) == ErrorCode.NONE
    client.close()

    victim = appliance_of(fleet, found.node_id)
    survivors = [a for a in fleet if a is not victim]
    kill_appliance(victim)
    moved = wait_until(lambda: (a := coordinator_of(survivors[0].port, "tx-fleet"))
                       and a.node_id != found.node_id and a, 60, "a new coordinator")
    client = RawClient(moved.port, timeout_s=30)
    state = wait_until(lambda: (s := describe(client, "tx-fleet")).error_code == 0 and s, 30,
                       "the new coordinator to load")
    assert (state.producer_id, state.producer_epoch) == (pid.producer_id, pid.producer_epoch)
    wait_until(lambda: describe(client, "tx-fleet").transaction_state == "CompleteCommit",
               30, "CompleteCommit")
    client.close()
    victim.start(timeout_s=60)
