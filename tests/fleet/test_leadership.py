"""Leadership operations of a fleet of three real appliances (two workers each) and a real
three-server ZooKeeper: controlled shutdown, preferred-leader election (requested with
`klog cluster elect-leaders`, and automatic), and unclean leader election on and off.

Appliance 1 runs with `auto.leader.rebalance.enable=false`, the others with a 2 s
`leader.imbalance.check.interval.seconds`: the controller's own settings decide, as in
Kafka, so while appliance 1 controls the fleet leadership stays where a shutdown put it (and
`elect-leaders` moves it back), and once appliance 1 has stopped, its successor rebalances by
itself."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.conftest import REPO, Appliance
from tests.fleet.harness import (
    SESSION_MS,
    AckedWriter,
    FleetSpec,
    all_replicas_equal,
    controller_and_epoch,
    kill_appliance,
    led,
    metadata,
    partition_state,
    read_partition,
)
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "orders"
PARTITIONS = 6
CHECK_S = 2  # leader.imbalance.check.interval.seconds of appliances 2 and 3
FLEET = FleetSpec("/klog-leadership", settings={
    "default.replication.factor": "3", "replica.lag.time.max.ms": "5000",
    "leader.imbalance.check.interval.seconds": str(CHECK_S)},
    settings_of={1: {"auto.leader.rebalance.enable": "false"}})


@pytest.fixture(scope="module")
def orders(fleet, zk):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 30, "leaders")
    wait_until(lambda: in_sync(zk), 30, "whole ISRs")
    return TOPIC


def states(zk, topic: str = TOPIC, partitions: int = PARTITIONS) -> list[dict]:
    return [partition_state(zk, topic, p) for p in range(partitions)]


def preferred(zk, topic: str = TOPIC) -> dict[int, int]:
    data, _ = zk.get(f"/brokers/topics/{topic}")
    return {int(p): r[0] for p, r in orjson.loads(data)["partitions"].items()}


def in_sync(zk, topic: str = TOPIC, partitions: int = PARTITIONS, size: int = 3) -> bool:
    return all(len(s["isr"]) == size for s in states(zk, topic, partitions))


def led_by(zk, broker_id: int) -> list[int]:
    return [p for p, s in enumerate(states(zk)) if s["leader"] // 100 == broker_id]


def all_bootstraps(fleet: list[Appliance]) -> str:
    return ",".join(a.bootstrap for a in fleet)


def sigterm(appliance: Appliance) -> float:
    """Stop with SIGTERM; the seconds until the supervisor exited (with 0)."""
    started = time.monotonic()
    assert appliance.stop(timeout_s=60) == 0
    return time.monotonic() - started


def check_read_back(bootstrap: str, writer: AckedWriter) -> None:
    """Every acknowledged value is at its offset (or, acknowledged without one, somewhere in
    its partition), once, in the order it was written."""
    assert writer.acked
    for partition in range(PARTITIONS):
        acked = {o: v for (p, o), v in writer.acked.items() if p == partition}
        somewhere = {v for p, v in writer.acked_without_offset if p == partition}
        records = read_partition(bootstrap, TOPIC, partition, max(acked) + 1 + len(somewhere))
        offsets = [o for o, _ in records]
        assert offsets == sorted(set(offsets)), "offsets in order, each once"
        by_offset = dict(records)
        for offset, value in acked.items():
            assert by_offset.get(offset) == value, f"{partition}@{offset}"
        ours = [v for _, v in records if v >= writer.first_value]
        assert ours == sorted(set(ours)), "written once each, in order"
        assert somewhere <= set(ours), f"lost from {partition}: {sorted(somewhere - set(ours))}"


def controlled_shutdown_took(appliance: Appliance) -> float:
    """The supervisor's own report: when it stopped its workers, its nodes led no partition
    of TOPIC (what they still led had no other replica: __consumer_offsets, single-copy)."""
    done = re.findall(r"controlled shutdown done in ([\d.]+) s: nodes \[\d+, \d+\] lead "
                      r"(\d+) partition\(s\)(.*)", appliance.log_text())
    assert done, appliance.log_text()[-3000:]
    took, count, unmovable = done[-1]
    assert f"{TOPIC}-" not in unmovable and (count == "0" or "__consumer_offsets" in unmovable)
    return float(took)


def test_sigterm_moves_leadership_away_under_an_idempotent_acks_all_producer(fleet, zk, orders):
    """The leaders' appliance (not the controller) gets SIGTERM while a producer writes
    through every appliance: leadership moves away first, the producer sees no error at all,
    and every acknowledged value is read back once, in order. Back, it follows: the
    controller (appliance 1) does not rebalance by itself."""
    assert controller_and_epoch(zk)[0] == 1
    victim = fleet[1]
    assert led_by(zk, 2), "appliance 2 leads some partitions"
    epochs = [s["leader_epoch"] for s in states(zk)]
    writer = AckedWriter(all_bootstraps(fleet), TOPIC, PARTITIONS, 1_000_000).start()
    try:
        wait_until(lambda: len(writer.acked) >= 1500, 60, "acknowledgements before the stop")
        took = sigterm(victim)
        print(f"\nSIGTERM to exit: {took:.2f} s (controlled shutdown "
              f"{controlled_shutdown_took(victim):.2f} s)")
        moved = states(zk)
        assert not [s for s in moved if s["leader"] // 100 == 2 or s["leader"] < 0]
        assert [s["leader_epoch"] for s in moved] != epochs
        acked_at_stop = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked_at_stop + 1500, 60,
                   "acknowledgements without appliance 2")
        victim.start(timeout_s=60)
        wait_until(lambda: in_sync(zk), 60, "appliance 2 back in every ISR")
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    check_read_back(fleet[0].bootstrap, writer)
    assert not led_by(zk, 2), "no automatic rebalance under appliance 1"


def elect(fleet, *args: str) -> tuple[int, dict | str]:
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "elect-leaders",
                           "--config", str(fleet[0].config), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    if done.returncode == 0 and "--json" in args:
        return 0, orjson.loads(done.stdout)
    return done.returncode, done.stdout + done.stderr


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(fleet, zk, orders):
    wanted = preferred(zk)
    away = [p for p, node in wanted.items() if states(zk)[p]["leader"] != node]
    assert away, "the stop above left partitions away from their preferred replica"
    first = away[0]
    epoch = states(zk)[first]["leader_epoch"]
    code, report = elect(fleet, "--topic", TOPIC, "--partition", str(first), "--json")
    assert (code, report) == (0, {"elected": [f"{TOPIC}-{first}"], "already": [],
                                  "failed": {}})
    after = states(zk)[first]
    assert after["leader"] == wanted[first] and after["leader_epoch"] == epoch + 1
    code, text = elect(fleet, "--topic", TOPIC, "--partition", str(first))
    assert code == 0 and f"Valid replica already elected for partitions {TOPIC}-{first}" in text
    code, report = elect(fleet, "--all-topic-partitions", "--json")
    assert code == 0 and not report["failed"]
    assert sorted(report["elected"]) == sorted(f"{TOPIC}-{p}" for p in away[1:])
    assert all(s["leader"] == wanted[p] for p, s in enumerate(states(zk)))
    code, text = elect(fleet, "--topic", "no-such-topic")
    assert code == 2 and "'no-such-topic' does not exist" in text
    code, text = elect(fleet, "--topic", TOPIC, "--partition", "99")
    assert code == 2 and "no partition 99" in text


def test_the_controllers_own_shutdown_then_the_next_controller_rebalances(fleet, zk, orders):
    """SIGTERM of the controlling appliance under a producer: it moves leadership away
    itself, its successor takes over; once it is back in the ISRs, the successor's automatic
    rebalance gives it back the partitions it is the preferred replica of."""
    victim = fleet[0]
    mine = [p for p, node in preferred(zk).items() if node // 100 == 1]
    assert mine and sorted(led_by(zk, 1)) == sorted(mine)
    writer = AckedWriter(all_bootstraps(fleet), TOPIC, PARTITIONS, 2_000_000).start()
    try:
        wait_until(lambda: len(writer.acked) >= 1500, 60, "acknowledgements before the stop")
        took = sigterm(victim)
        print(f"\nSIGTERM of the controller to exit: {took:.2f} s (controlled shutdown "
              f"{controlled_shutdown_took(victim):.2f} s)")
        wait_until(lambda: controller_and_epoch(zk)[0] in (2, 3), 30, "another controller")
        assert not led_by(zk, 1)
        victim.start(timeout_s=60)
        wait_until(lambda: in_sync(zk), 60, "appliance 1 back in every ISR")
        wait_until(lambda: sorted(led_by(zk, 1)) == sorted(mine), 6 * CHECK_S + 30,
                   "the automatic rebalance to give appliance 1 its partitions back")
        acked = len(writer.acked)
        wait_until(lambda: len(writer.acked) >= acked + 500, 60, "acknowledgements after")
    finally:
        writer.stop()
    assert not writer.errors, writer.errors[:5]
    check_read_back(fleet[1].bootstrap, writer)
    controller = fleet[controller_and_epoch(zk)[0] - 1]
    assert "(auto rebalance)" in controller.log_text()


def create_in_zookeeper(zk, name: str, replicas: list[int], config: dict[str, str]) -> None:
    """A topic as Kafka's ZooKeeper tools wrote one: its config and assignment in one multi
    (the way to choose its replicas; CreateTopics refuses a manual assignment)."""
    tx = zk.transaction()
    tx.create(f"/config/topics/{name}", orjson.dumps({"version": 1, "config": config}))
    tx.create(f"/brokers/topics/{name}", orjson.dumps({
        "version": 2, "partitions": {"0": replicas}, "adding_replicas": {},
        "removing_replicas": {}}))
    assert not [r for r in tx.commit() if isinstance(r, Exception)]


def produce(bootstrap: str, topic: str, values) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "message.timeout.ms": 60_000})
    errors = []
    for value in values:
        producer.produce(topic, str(value).encode(), partition=0,
                         on_delivery=lambda err, msg: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(90) == 0 and not errors, errors[:3]


def values_of(bootstrap: str, topic: str, end: int) -> list[int]:
    return [v for _, v in read_partition(bootstrap, topic, 0, end, timeout_s=30)]


def test_unclean_election_on_and_off(fleet, zk, orders):
    """Two topics on the same two appliances x (leader) and y, one with
    unclean.leader.election.enable=true. y stops (leaving both ISRs), x takes 50 more
    writes alone, then x dies: its ISR's only member. With y back, the clean topic stays
    offline and loses nothing once x returns; the unclean one is led by y at once, and the
    50 records only x had are lost when x returns, as in Kafka."""
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    with pytest.raises(Exception, match="unclean.leader.election.enable must be true or false"):
        admin.create_topics([NewTopic("muddled", 1, 2, config={
            "unclean.leader.election.enable": "maybe"})])["muddled"].result(30)
    controller_id = controller_and_epoch(zk)[0]
    x, y = [a for a in fleet if a.settings["broker.id"] != str(controller_id)]
    x_node, y_node = int(x.settings["broker.id"]) * 100, int(y.settings["broker.id"]) * 100
    create_in_zookeeper(zk, "kept", [x_node, y_node], {})
    create_in_zookeeper(zk, "lossy", [x_node, y_node],
                        {"unclean.leader.election.enable": "true"})
    for name in ("kept", "lossy"):
        wait_until(lambda n=name: zk.exists(f"/brokers/topics/{n}/partitions/0/state") and
                   partition_state(zk, n, 0)["isr"] == [x_node, y_node], 30,
                   f"{name} led by {x_node} with a whole ISR")
        produce(x.bootstrap, name, range(100))
    described = admin.describe_configs([ConfigResource("topic", "lossy")])
    entries = next(iter(described.values())).result(30)
    assert entries["unclean.leader.election.enable"].value == "true"
    sigterm(y)
    for name in ("kept", "lossy"):
        assert partition_state(zk, name, 0)["isr"] == [x_node]
        produce(x.bootstrap, name, range(100, 150))  # acknowledged by x alone
    before = partition_state(zk, "lossy", 0)
    kill_appliance(x)
    y.start(timeout_s=60)
    lossy = wait_until(lambda: (s := partition_state(zk, "lossy", 0))["leader"] == y_node and s,
                       SESSION_MS / 1000 + 30, "an unclean election of y")
    assert lossy["isr"] == [y_node] and lossy["leader_epoch"] > before["leader_epoch"]
    controller = fleet[controller_id - 1]
    assert re.search(rf"lossy-0: UNCLEAN leader election: no in-sync replica of \[{x_node}\] "
                     rf"is live, so out-of-sync replica {y_node} leads", controller.log_text())
    produce(y.bootstrap, "lossy", range(1000, 1020))
    kept = partition_state(zk, "kept", 0)
    assert (kept["leader"], kept["isr"]) == (-1, [x_node]), "offline: no unclean election"
    assert metadata(y.bootstrap).topics["kept"].partitions[0].leader == -1
    x.start(timeout_s=60)
    wait_until(lambda: partition_state(zk, "kept", 0)["leader"] == x_node, 60,
               "x to lead kept again")
    for name in ("kept", "lossy"):
        wait_until(lambda n=name: len(partition_state(zk, n, 0)["isr"]) == 2, 60,
                   f"{name}'s ISR whole again")
        wait_until(lambda n=name: all_replicas_equal([x, y], n, 1), 60, f"{name} alike")
    assert values_of(y.bootstrap, "kept", 150) == list(range(150))
    assert values_of(x.bootstrap, "lossy", 120) == list(range(100)) + list(range(1000, 1020))


def test_a_controlled_shutdown_waits_at_most_its_bound(fleet, zk, orders):
    """With the controller paused (its supervisor stopped, its session alive), nothing moves:
    an appliance told to stop waits controlled.shutdown.max.retries x retry.backoff.ms, says
    so, and stops anyway; told twice, it stops at once."""
    victim = next(a for a in fleet if a is not fleet[controller_and_epoch(zk)[0] - 1])
    with victim.config.open("a") as config:  # 2 x 1.5 s: well within the 6 s session
        config.write("controlled.shutdown.max.retries=2\n"
                     "controlled.shutdown.retry.backoff.ms=1500\n")
    sigterm(victim)
    for twice in (False, True):
        victim.start(timeout_s=60)
        wait_until(lambda: in_sync(zk), 60, "the victim back in every ISR")
        # the controller of now: a pause longer than its session would have moved it
        controller = fleet[controller_and_epoch(zk)[0] - 1]
        assert controller is not victim
        asked = victim.log_text().count("controlled shutdown: asking")
        decided = "stop signal during the controlled shutdown" if twice else \
            "controlled shutdown incomplete"
        before = victim.log_text().count(decided)
        os.kill(controller.process.pid, signal.SIGSTOP)
        try:
            victim.process.send_signal(signal.SIGTERM)
            wait_until(lambda n=asked: victim.log_text().count(
                "controlled shutdown: asking") > n, 30, "the controlled shutdown to begin")
            if twice:
                victim.process.send_signal(signal.SIGTERM)
            # the controller runs again once the victim has given up on it: well within its
            # session, however slowly the victim's workers finish afterwards
            wait_until(lambda d=decided, n=before: victim.log_text().count(d) > n, 30,
                       "the controlled shutdown to end")
        finally:
            os.kill(controller.process.pid, signal.SIGCONT)
        assert victim.process.wait(60) == 0
        victim.stop()
        text = victim.log_text()
        if not twice:
            assert re.search(r"controlled shutdown attempt 1 of 2: \d+ partition\(s\) still to "
                             r"move", text)
            assert re.search(r"controlled shutdown incomplete after 2 attempt\(s\) \([\d.]+ s\):"
                             r" [1-9]\d* partition\(s\) could still move \([\w.-]+-\d+", text)
        else:
            assert "stop signal during the controlled shutdown: stopping now" in text
            assert text.count("controlled shutdown incomplete") == 1  # the first time only
