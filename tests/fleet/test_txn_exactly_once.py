"""Exactly-once across a fleet (issue 23's acceptance): three appliances, a real ZooKeeper;
input and output of three partitions with three replicas; the confluent-kafka
consume-transform-produce loop of tests/transactions/test_exactly_once.py runs while the
appliance of its transaction coordinator is killed with -9 mid-run (the coordinator moves
to the new leader of its ``__transaction_state`` partition, which reloads it and finishes
what was decided), then the loop process itself. A read_committed consumer of the output
sees every input record transformed exactly once, in per-partition order."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from klog.protocol.apis import find_coordinator
from tests.fleet.conftest import ensemble, fleet, zk  # noqa: F401 (the fleet's fixtures)
from tests.fleet.harness import FleetSpec, appliance_of, led
from tests.polling import wait_until
from tests.transactions.exactly_once_helpers import (
    QUICK_SESSIONS,
    Loop,
    drain,
    expected,
    feed,
    first_difference,
    kill_9,
)
from tests.worker.raw import RawClient

pytestmark = pytest.mark.interop

PARTITIONS = 3
PER_PARTITION = 150
TXN_ID = "eos-fleet"
FLEET = FleetSpec("/klog-txn-eos", log_dirs=1, settings={
    "transaction.state.log.num.partitions": "2", "default.replication.factor": "3",
    "offsets.topic.num.partitions": "4", "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0", **QUICK_SESSIONS})


def _coordinator_node(appliance) -> int | None:
    client = RawClient(appliance.port)
    try:
        answer = client.call(find_coordinator, 2, key=TXN_ID, key_type=1)
    finally:
        client.close()
    return answer.node_id if answer.error_code == 0 else None


def test_exactly_once_through_the_coordinators_kill_9(fleet, tmp_path):  # noqa: F811
    bootstrap = ",".join(a.bootstrap for a in fleet)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    source, sink = "eos-fleet-in", "eos-fleet-out"
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 3, config={
            "min.insync.replicas": "2"}) for t in (source, sink)]).values():
        future.result(30)
    wait_until(lambda: led(fleet[0].bootstrap, source, PARTITIONS)
               and led(fleet[0].bootstrap, sink, PARTITIONS), 30, "leaders")
    feed(bootstrap, source, PARTITIONS, PER_PARTITION)
    loop = Loop(tmp_path, bootstrap, source, sink, "eos-fleet-group", TXN_ID, batch=6,
                pause=0.02).start()
    started = time.monotonic()
    try:
        assert loop.wait_commits(4, timeout_s=60), loop.tail()  # a fleet's first group
        node = wait_until(lambda: _coordinator_node(fleet[0]), 30, "the coordinator")
        victim = appliance_of(fleet, node)
        print(f"{time.monotonic() - started:6.2f} s: kill -9 of appliance "
              f"{victim.settings['broker.id']} (transaction coordinator, node {node})")
        kill_9(victim)
        survivors = [a for a in fleet if a is not victim]
        moved = wait_until(lambda: (n := _coordinator_node(survivors[0])) not in (None, node)
                           and n, 60, "a new coordinator")
        print(f"{time.monotonic() - started:6.2f} s: coordinator moved to node {moved}")
        loop.wait_commits(3, timeout_s=20)
        print(f"{time.monotonic() - started:6.2f} s: kill -9 of the loop")
        loop.kill()
        loop.start()
        victim.start(timeout_s=60)
        seen = drain(loop, bootstrap, sink, PARTITIONS, PARTITIONS * PER_PARTITION,
                     timeout_s=150)
        wrong = first_difference(seen, expected(PARTITIONS, PER_PARTITION))
        assert not wrong, f"{wrong}; the loop's last run:\n{loop.tail()}"
        print(f"exactly once after {loop.runs} loop runs, {time.monotonic() - started:.1f} s")
    finally:
        loop.kill()
