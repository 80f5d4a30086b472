"""Many replicated partitions on a fleet of three (issue 26), at a size CI can afford: 400
partitions of replication factor 3 (1,200 replicas over six workers). A kill -9 of the
controller's appliance must leave every partition led by a live node, in ZooKeeper (the new
controller elected them all) and in a survivor's Metadata (the appliances relayed it), and
the killed appliance must come back into every ISR. The 10,000-partition figures live in
perf/bench_fleet_partitions.py. About 35 s on a 2-core machine (33 s measured, load average 15)."""

from __future__ import annotations

import orjson

from tests.fleet.harness import (
    FleetSpec,
    controller_and_epoch,
    kill_appliance,
    metadata,
)
from tests.polling import wait_until

TOPICS = ("wide-a", "wide-b")
PER_TOPIC = 200
TOTAL = PER_TOPIC * len(TOPICS)

FLEET = FleetSpec("/klog-many-partitions", settings={
    # small preallocated files: 1,200 replicas at the default 10 MiB would be 12 GB of disk
    "log.segment.bytes": "65536",
    "log.index.size.max.bytes": "65536",
})


def states(zk) -> list[dict]:
    """Every partition's state znode, read pipelined (one round trip, not 400)."""
    asyncs = [zk.get_async(f"/brokers/topics/{t}/partitions/{p}/state")
              for t in TOPICS for p in range(PER_TOPIC)]
    out = []
    for result in asyncs:
        try:
            out.append(orjson.loads(result.get(timeout=30)[0]))
        except Exception:  # noqa: BLE001 - not written yet
            out.append({"leader": -1, "isr": []})
    return out


def led_in_metadata(bootstrap: str, dead: set[int]) -> bool:
    found = metadata(bootstrap).topics
    return all(t in found and len(found[t].partitions) == PER_TOPIC and
               all(p.leader >= 0 and p.leader not in dead for p in found[t].partitions.values())
               for t in TOPICS)


def test_a_controller_kill_leaves_every_partition_led(fleet, zk):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    for future in admin.create_topics([NewTopic(t, PER_TOPIC, 3) for t in TOPICS],
                                      request_timeout=120).values():
        future.result(timeout=150)
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk)), 120,
               "every partition with its three replicas in sync")
    controller, epoch = controller_and_epoch(zk)
    victim = next(a for a in fleet if a.settings["broker.id"] == str(controller))
    survivor = next(a for a in fleet if a is not victim)
    dead = {controller * 100, controller * 100 + 1}
    led_before = sum(1 for s in states(zk) if s["leader"] in dead)
    assert led_before > 0, "the controller's appliance led nothing: the kill proves little"

    kill_appliance(victim)
    wait_until(lambda: controller_and_epoch(zk)[1] > epoch and
               controller_and_epoch(zk)[0] not in (-1, controller), 60, "a new controller")
    wait_until(lambda: all(s["leader"] >= 0 and s["leader"] not in dead for s in states(zk)),
               60, "every partition led by a live node in ZooKeeper")
    wait_until(lambda: led_in_metadata(survivor.bootstrap, dead), 60,
               "every partition led by a live node in a survivor's Metadata")
    assert all(not dead & set(s["isr"]) for s in states(zk)), "dead nodes left in an ISR"

    victim.start(timeout_s=120)
    wait_until(lambda: all(len(s["isr"]) == 3 for s in states(zk)), 120,
               "the restarted appliance back in every ISR")
