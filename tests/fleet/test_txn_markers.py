"""Transaction markers across a fleet (three appliances of two workers, a real ZooKeeper): a
partition of replication factor 3 gets a transactional batch, an ABORT marker (answered once
committed: the followers have it), then a second producer's transaction left open. Every
replica holds the marker and the same .txnindex (followers index aborts as they append); kill
-9 of the leader's appliance leaves a new leader whose producer state still has the open
transaction (its LSO holds there) and whose read_committed answers name the aborted one.
The batches come without a coordinator, so KIP-890's verification is off here
(tests/transactions/test_kip890_verification.py covers it)."""

from __future__ import annotations

import pytest

from tests.fleet.harness import (
    SESSION_MS,
    FleetSpec,
    all_replicas_equal,
    kill_appliance,
    led,
    partition_state,
)
from tests.polling import wait_until
from tests.transactions.test_appliance_txn import ABORT, Writer

pytestmark = pytest.mark.interop

TOPIC = "txn-replicated"
FLEET = FleetSpec("/klog-txn", settings={"replica.lag.time.max.ms": "3000",
                                         "transaction.partition.verification.enable": "false"})


def txn_indexes(fleet) -> list[bytes]:
    found = []
    for appliance in fleet:
        for disk in appliance.log_dirs:
            found += [p.read_bytes() for p in disk.glob(f"{TOPIC}-0/*.txnindex")]
    return found


def test_markers_replicate_and_survive_a_failover(fleet, zk):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, 1), 30, "a leader")
    wait_until(lambda: len(partition_state(zk, TOPIC, 0)["isr"]) == 3, 30, "a full ISR")
    writer = Writer(fleet[0], TOPIC)
    aborted, still_open = writer.producer(), writer.producer()
    writer.send(["a0", "a1"], aborted)  # 0-1
    writer.send(["p0"])  # 2
    assert writer.marker(aborted, ABORT) == [0]  # 3, committed on the ISR
    open_first = writer.send(["o0"], still_open)  # 4
    writer.send(["p1"])  # 5
    writer.close()
    wait_until(lambda: all_replicas_equal(fleet, TOPIC, 1), 30, "the same batches everywhere")
    indexes = txn_indexes(fleet)
    assert len(indexes) == 3 and len(set(indexes)) == 1  # one entry, alike on every replica
    before = partition_state(zk, TOPIC, 0)
    victim = next(a for a in fleet if a.settings["broker.id"] == str(before["leader"] // 100))
    kill_appliance(victim)
    wait_until(lambda: partition_state(zk, TOPIC, 0)["leader"] // 100
               not in (-1, before["leader"] // 100), SESSION_MS / 1000 + 30, "a new leader")
    survivor = next(a for a in fleet if a is not victim)

    def answered():
        try:
            probe = Writer(survivor, TOPIC)
        except (OSError, KeyError):  # metadata still names the dead leader
            return None
        try:
            answer = probe.raw_fetch(probe.leader_port, 1)
        except OSError:
            return None
        finally:
            probe.close()
        return answer if answer.error_code == 0 and answer.high_watermark == 6 else None

    committed = wait_until(answered, 30, "the new leader to serve up to the old high watermark")
    assert committed.last_stable_offset == open_first
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [
        (aborted[0], 0)]
    victim.start(timeout_s=60)
