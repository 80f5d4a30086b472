"""Issue 12's acceptance: faults on a fleet of three appliances in network namespaces under a
steady workload, each in its own seeded test, each checked by every rule of checker.py.

The fleet (fleet.py) starts once for the module; each test creates its own topic
(replication factor 3, min.insync.replicas=2), runs the workload (workload.py: an idempotent
confluent-kafka producer and a kafka-python producer, both acks=all, a consumer group of two
reading and committing throughout), injects its fault, heals it, waits until the fleet is
whole (every appliance registered, every ISR full, every partition led by its preferred
replica again), and hands everything observed to the checker. Which partition's leader is
hit and the timings come from random.Random(seed).

The reassignment to a fourth appliance comes last: it leaves that appliance in the fleet,
holding replicas, where the other tests expect three.
"""

from __future__ import annotations

import random
import time

import orjson
import pytest
from confluent_kafka import Producer

from appliance.workers.groups.offsets_log import partition_for
from tests.faults.checker import Ack, check
from tests.faults.fleet import (
    CORE,
    LAG_MS,
    NODES_PER_APPLIANCE,
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    SESSION_MS,
    SPARE,
    FaultFleet,
)
from tests.faults.workload import PARTITIONS, Workload
from tests.polling import wait_until

pytestmark = pytest.mark.interop

SESSION_S = SESSION_MS / 1000
ELECTION_S = SESSION_S + 60  # a session expiry, then the controller's pass, on a busy machine


@pytest.fixture
def workload(whole):
    """`workload(name)`: a started Workload on the whole fleet; aborted if the test fails."""
    started: list[Workload] = []

    def make(name: str) -> Workload:
        load = Workload(whole, name)
        started.append(load)
        return load.start()
    yield make
    for load in started:
        load.abort()


def verdict(load: Workload, *, produce_errors: bool = True) -> None:
    """Finish the workload; assert the checker finds nothing and no appliance logged a
    traceback since the workload began (and, unless `produce_errors`, that neither producer
    saw an error)."""
    seen = load.finish()
    dump = load.fleet.workdir / f"{load.topic}.observations.json"
    # for a post-mortem
    dump.write_bytes(orjson.dumps(seen, default=sorted, option=orjson.OPT_NON_STR_KEYS))
    violations = check(seen)
    reads = sum(1 for e in seen.group if e.kind == "read")
    blind = sum(1 for a in seen.acks if a.offset is None or a.offset < 0)
    summary = (f"{len(seen.acks)} acknowledged ({blind} without an offset), "
               f"{reads} read by the group, "
               f"{len(seen.states)} partition states seen, "
               f"{len(load.errors())} produce errors {load.errors()[:3]}")
    print(f"{load.topic}: {summary}; observations in {dump}")
    assert not violations, f"{len(violations)} violations ({summary}):\n" + "\n".join(
        violations[:40])
    unhandled = load.fleet.tracebacks_since(load.log_marks)
    assert not unhandled, "the appliances logged tracebacks:\n" + "\n".join(unhandled[:20])
    if not produce_errors:
        assert load.errors() == [], f"{len(load.errors())} produce errors: {load.errors()[:10]}"


def moved(fleet: FaultFleet, topic: str, partition: int, old_epoch: int, away_from: int):
    """A predicate: the partition has a leader off appliance `away_from` in a newer epoch."""
    def check_state():
        state = fleet.state(topic, partition)
        return (state["leader"] >= 0 and state["leader"] // NODES_PER_APPLIANCE != away_from
                and state["leader_epoch"] > old_epoch and state)
    return check_state


def nodes_of(broker_id: int, fleet: FaultFleet) -> set[int]:
    return {n for n in range(broker_id * NODES_PER_APPLIANCE,
                             (broker_id + 1) * NODES_PER_APPLIANCE)} & fleet.registered()


def test_kill_9_of_the_leader_five_bounces_in_a_row(whole, workload):
    """Five times, the appliance leading a (seeded) partition is killed and started again;
    leadership comes back to it once it has caught up. One of the five (seeded) kills the
    group's coordinator instead (`kill_the_coordinator`)."""
    rng = random.Random(1201)
    load = workload("kill")
    coordinator_bounce = rng.randrange(5)
    for bounce in range(5):
        if bounce == coordinator_bounce:
            kill_the_coordinator(whole, load, rng)
            continue
        partition = rng.randrange(PARTITIONS)
        before = whole.state(load.topic, partition)
        victim = before["leader"] // NODES_PER_APPLIANCE
        whole.kill(victim)
        wait_until(moved(whole, load.topic, partition, before["leader_epoch"], victim),
                   ELECTION_S, f"a new leader of partition {partition}")
        time.sleep(rng.uniform(0, 2))
        whole.start_appliance(victim)
        whole.wait_whole()
        load.wait_progress(200)
    verdict(load)


def kill_the_coordinator(whole: FaultFleet, load: Workload, rng: random.Random) -> None:
    """kill -9 of the appliance leading the group's partition of __consumer_offsets, while
    the members hold their commits: once another appliance leads it, a third member joins,
    and in that rebalance every member must resume each partition exactly where the commits
    acknowledged before the kill left it (the checker's commit rules). The new coordinator
    can only know them from its replica of the offsets topic: nothing commits meanwhile
    that could hide a commit it lost."""
    partition = partition_for(load.group, OFFSETS_PARTITIONS)
    before = whole.state(OFFSETS_TOPIC, partition)
    victim = before["leader"] // NODES_PER_APPLIANCE
    assert victim == whole.coordinator(load.group)
    mark = load.hold_commits()
    whole.kill(victim)
    wait_until(moved(whole, OFFSETS_TOPIC, partition, before["leader_epoch"], victim),
               ELECTION_S, f"another coordinator for {load.group}")
    load.join(f"m{len(load.members) + 1}")
    wait_until(lambda: load.resumed_since(mark) == set(range(PARTITIONS)), 120,
               "every partition to be assigned again and read from where the group left it")
    load.release_commits()
    time.sleep(rng.uniform(0, 2))
    whole.start_appliance(victim)
    whole.wait_whole()
    load.wait_progress(200)


def test_sigterm_of_the_leader_controlled_shutdown_without_a_produce_error(whole, workload):
    """SIGTERM of the leader's appliance: a controlled shutdown moves every partition it
    leads to another in-sync replica (and takes its replicas out of the ISRs) before it
    exits, so neither producer sees an error; started again, it catches up, and the
    controller's rebalance gives it its leaders back, again without an error."""
    rng = random.Random(1207)
    load = workload("sigterm")
    partition = rng.randrange(PARTITIONS)
    before = whole.state(load.topic, partition)
    victim = before["leader"] // NODES_PER_APPLIANCE
    marks = whole.log_marks()
    assert whole.terminate(victim) == 0
    # moved before the appliance exited, not after its session expired
    assert moved(whole, load.topic, partition, before["leader_epoch"], victim)(), \
        whole.state(load.topic, partition)
    log = whole.appliance(victim).log_text()[marks[victim]:]
    assert "controlled shutdown done" in log and "lead 0 partition(s)" in log, log[-3000:]
    time.sleep(rng.uniform(0.5, 2))
    whole.start_appliance(victim)
    whole.wait_whole()
    assert whole.state(load.topic, partition)["leader"] // NODES_PER_APPLIANCE == victim
    load.wait_progress(200)
    verdict(load, produce_errors=False)


def test_sigstop_of_the_leader_past_its_session_then_sigcont(whole, workload):
    """When its processes resume, the paused appliance's workers still lead as they did
    before the pause until the supervisor hears from ZooKeeper that its session expired and
    the fleet moved on: such a zombie serves the requests its clients queued meanwhile, and
    a producer that bootstraps from it (acks=all, no retries) writes to it. Whatever the
    zombie acknowledges must survive: it may append, but never commit, what it cannot
    replicate."""
    rng = random.Random(1202)
    load = workload("pause")
    partition = rng.randrange(PARTITIONS)
    before = whole.state(load.topic, partition)
    victim = before["leader"] // NODES_PER_APPLIANCE
    whole.pause(victim)
    try:
        wait_until(moved(whole, load.topic, partition, before["leader_epoch"], victim),
                   ELECTION_S, f"a new leader of partition {partition}")
        time.sleep(rng.uniform(0.5, 2))
    finally:
        whole.resume(victim)
    probe = Producer({"bootstrap.servers": whole.appliance(victim).bootstrap, "acks": "all",
                      "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                      "message.timeout.ms": 20_000})
    acked: list[Ack] = []
    for seq in range(20):
        probe.produce(load.topic, f"z-{seq}".encode(), partition=partition,
                      on_delivery=lambda err, msg, seq=seq: err is None and acked.append(
                          Ack("z", seq, msg.partition(), msg.offset())))
        probe.poll(0.05)
    assert probe.flush(30) == 0
    load.extra_acks += acked
    whole.wait_whole()
    load.wait_progress(200)
    cut = whole.appliance(victim).log_text().count(f"{load.topic}-{partition}: truncating")
    print(f"zombie probes acknowledged: {len(acked)} of 20; the zombie truncated "
          f"{load.topic}-{partition} {cut} time(s)")
    verdict(load)


def test_partition_of_the_leader_from_zookeeper_and_its_followers(whole, workload):
    """iptables in the leader's namespace drop its traffic with ZooKeeper and the other
    appliances; clients still reach it (they are outside the partition) and keep writing to
    it until they learn of the new leader."""
    rng = random.Random(1203)
    load = workload("partition")
    partition = rng.randrange(PARTITIONS)
    before = whole.state(load.topic, partition)
    victim = before["leader"] // NODES_PER_APPLIANCE
    whole.cut(victim, zookeeper=True, peers=True)
    try:
        wait_until(moved(whole, load.topic, partition, before["leader_epoch"], victim),
                   ELECTION_S, f"a new leader of partition {partition}")
        time.sleep(rng.uniform(1, 4))
    finally:
        whole.heal(victim)
    whole.wait_whole()
    load.wait_progress(200)
    verdict(load)


def test_partition_of_one_follower_shrinks_then_expands_the_isr(whole, workload):
    """A follower's appliance cut from its peers (not from ZooKeeper): after
    replica.lag.time.max.ms its replica leaves the partition's ISR, and once healed it
    catches up and returns."""
    rng = random.Random(1204)
    load = workload("follower")
    partition = rng.randrange(PARTITIONS)
    before = whole.state(load.topic, partition)
    follower = rng.choice(sorted(r for r in before["isr"] if r != before["leader"]))
    cut = follower // NODES_PER_APPLIANCE
    whole.cut(cut, peers=True)
    try:
        wait_until(lambda: follower not in whole.state(load.topic, partition)["isr"],
                   LAG_MS / 1000 + 60, f"follower {follower} to leave the ISR")
        time.sleep(rng.uniform(0.5, 2))
    finally:
        whole.heal(cut)
    wait_until(lambda: follower in whole.state(load.topic, partition)["isr"], 90,
               f"follower {follower} to return to the ISR")
    whole.wait_whole()
    # as the watch saw it: full, then without the follower, then full again
    sizes = wait_until(lambda: (found := load.watcher.isr_sizes(partition))[-1] == 3 and found,
                       30, "the watch to see the full ISR")
    assert sizes[0] == 3 and 2 in sizes, sizes
    load.wait_progress(200)
    verdict(load)


def test_zookeeper_session_expiry_of_the_leader(whole, workload):
    """The leader's appliance cut from ZooKeeper only, past its session timeout: its nodes
    leave /brokers/ids, its partitions get other leaders; healed, it finds its session
    expired, registers again on a new one and rejoins every ISR."""
    rng = random.Random(1205)
    load = workload("expiry")
    partition = rng.randrange(PARTITIONS)
    before = whole.state(load.topic, partition)
    victim = before["leader"] // NODES_PER_APPLIANCE
    nodes = nodes_of(victim, whole)
    owner = whole.zk.get(f"/brokers/ids/{min(nodes)}")[1].ephemeralOwner
    whole.cut(victim, zookeeper=True)
    try:
        wait_until(lambda: not nodes & whole.registered(), SESSION_S + 30,
                   f"nodes {sorted(nodes)} to expire")
        wait_until(moved(whole, load.topic, partition, before["leader_epoch"], victim),
                   ELECTION_S, f"a new leader of partition {partition}")
        time.sleep(rng.uniform(0.5, 2))
    finally:
        whole.heal(victim)
    wait_until(lambda: nodes <= whole.registered(), 60, f"nodes {sorted(nodes)} to return")
    assert whole.zk.exists(f"/klog/appliances/{victim}") is not None
    assert whole.zk.get(f"/brokers/ids/{min(nodes)}")[1].ephemeralOwner != owner
    whole.wait_whole()
    load.wait_progress(200)
    verdict(load)


def test_bounces_of_the_controller(whole, workload):
    """The controlling appliance killed (kill -9) and stopped (SIGTERM), in a seeded order,
    each time restarted: another appliance takes over in a higher controller epoch."""
    rng = random.Random(1206)
    load = workload("controller")
    for how in rng.sample(["kill", "term"], 2):
        controller = whole.controller()
        epoch = int(whole.zk.get("/controller_epoch")[0])
        if how == "kill":
            whole.kill(controller)
        else:
            whole.terminate(controller)
        wait_until(lambda old=controller, epoch=epoch: whole.controller() not in (-1, old)
                   and int(whole.zk.get("/controller_epoch")[0]) > epoch, ELECTION_S,
                   "another controller")
        time.sleep(rng.uniform(0, 2))
        whole.start_appliance(controller)
        whole.wait_whole()
        load.wait_progress(200)
    verdict(load)


THROTTLE = 50_000  # bytes per second and node, for the second part of the reassignment


def test_reassignment_to_a_fourth_appliance_under_load(whole, workload, tmp_path):
    """A fourth appliance starts and takes its share of the workload's topic: `klog cluster
    reassign --generate` proposes it, and the moves are executed in two parts (seeded), the
    second with a throttle, each waited for with `--verify`, under the workload. Nothing
    acknowledged is lost, the group reads on throughout, the replicas the final assignment
    names hold the same batches and the replicas moved away are deleted (checker), and
    `--verify` clears the throttle.

    The last test of the module: the fourth appliance stays, holding replicas."""
    rng = random.Random(1208)
    load = workload("reassign")
    whole.start_appliance(SPARE)
    whole.wait_registered([*CORE, SPARE])
    generated = whole.reassign("--generate", "--topics", load.topic,
                               "--appliances", ",".join(map(str, (*CORE, SPARE))))
    assert generated.returncode == 0, generated.stderr
    proposal = orjson.loads(generated.stdout.split(
        "Proposed partition reassignment configuration\n")[1])["partitions"]
    target = {e["partition"]: tuple(e["replicas"]) for e in proposal}
    on_spare = sum(1 for r in target.values() for n in r if n // NODES_PER_APPLIANCE == SPARE)
    assert on_spare >= PARTITIONS * 3 // (len(CORE) + 1), target
    before = whole.assignment(load.topic)
    moves = sorted(p for p in target if target[p] != tuple(before[p]))
    rng.shuffle(moves)
    assert len(moves) >= 2, target
    half = len(moves) // 2
    for number, (part, throttle) in enumerate(((moves[:half], None),
                                               (moves[half:], THROTTLE))):
        plan = tmp_path / f"part{number}.json"
        plan.write_bytes(orjson.dumps({"version": 1, "partitions": [
            {"topic": load.topic, "partition": p, "replicas": list(target[p])}
            for p in sorted(part)]}))
        extra = ("--throttle", str(throttle)) if throttle else ()
        executed = whole.reassign("--execute", "--reassignment-json-file", str(plan), *extra)
        assert executed.returncode == 0, executed.stderr
        if throttle:
            assert f"throttle limit was set to {throttle} B/s" in executed.stdout
            assert "follower.replication.throttled.replicas" in topic_config(whole, load.topic)
        consumed = len(load.consumed())
        verified = wait_until(lambda plan=plan: verified_complete(whole, plan), 180,
                              f"part {number} of the reassignment to complete")
        if throttle:
            assert f"Clearing topic-level throttles on topic {load.topic}" in verified
            assert "follower.replication.throttled.replicas" not in topic_config(
                whole, load.topic)
        load.wait_progress(200)
        assert len(load.consumed()) > consumed, "the group stopped reading"
    assert {p: tuple(r) for p, r in whole.assignment(load.topic).items()} == target
    wait_until(lambda: not whole.set_aside(load.topic), 30, "the moved-away logs to go")
    print(f"{load.topic}: {len(moves)} partitions moved, {on_spare} replicas on a{SPARE}")
    verdict(load, produce_errors=False)


def verified_complete(fleet: FaultFleet, plan) -> str:
    """`--verify`'s output once it says every partition of the plan is completed."""
    verified = fleet.reassign("--verify", "--reassignment-json-file", str(plan))
    assert verified.returncode in (0, 3), verified.stderr
    return verified.returncode == 0 and verified.stdout


def topic_config(fleet: FaultFleet, topic: str) -> dict:
    path = f"/config/topics/{topic}"
    return orjson.loads(fleet.zk.get(path)[0])["config"] if fleet.zk.exists(path) else {}
