"""Partition reassignment (`klog cluster reassign`) on three real appliances (two workers each)
and a fourth that joins later, against a real three-server ZooKeeper.

Under an idempotent acks=all confluent-kafka producer and a consumer group, a topic of
replication factor 3 (min.insync.replicas=2) is moved so that the fourth appliance takes its
share: every acknowledged value is read back once, in per-partition order; the new replicas
hold the same batches as the others; the removed replicas' directories are gone; the group
reads on, from the new leaders. A throttled move copies within its rate, goes on through a
kill -9 of the controller's appliance midway, and `--verify` clears the throttle. Bad plans
are refused before anything is written."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from klog_cli.main import main as klog_main
from tests.conftest import REPO
from tests.fleet.harness import (
    SESSION_MS,
    AckedWriter,
    FleetSpec,
    controller_and_epoch,
    kill_appliance,
    led,
    partition_state,
    read_partition,
    replica_batches,
    replica_bytes,
    wait_for_brokers,
)
from tests.polling import wait_until

pytestmark = pytest.mark.interop

TOPIC = "moving"
PARTITIONS = 4
SLOW = "slow"
THROTTLE = 1_000_000  # bytes per second, per node
SLOW_BYTES = 4_000_000  # copied under the throttle: at least 4 s
# a moved-away log is set aside at once and removed file.delete.delay.ms later
# appliances 1-3 running, and appliance 4 (index 3) configured but not started
FLEET = FleetSpec("/klog-reassign", joining_later=(4,), settings={
    "default.replication.factor": "3", "replica.lag.time.max.ms": "5000",
    "file.delete.delay.ms": "1000"})


def reassign(fleet, *args: str) -> subprocess.CompletedProcess:
    """`klog cluster reassign ARGS` as an operator runs it, against the fleet's ZooKeeper."""
    return subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "reassign", "--config",
                           str(fleet[0].config), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def assignment(zk, topic: str) -> dict:
    return orjson.loads(zk.get(f"/brokers/topics/{topic}")[0])


def replicas_of(zk, topic: str, partition: int) -> tuple[int, ...]:
    return tuple(assignment(zk, topic)["partitions"][str(partition)])


def set_aside(fleet, topic: str) -> list[Path]:
    """Log directories of `topic` renamed aside for deletion and not removed yet."""
    return [path for appliance in fleet for disk in appliance.log_dirs
            for path in Path(disk).glob(f"{topic}-*-delete")]


def config(zk, path: str) -> dict:
    return orjson.loads(zk.get(path)[0])["config"] if zk.exists(path) else {}


def write_plan(path, entries) -> str:
    path.write_text(orjson.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for t, p, r in entries]}).decode())
    return str(path)


def wait_completed(fleet, plan: str, timeout_s: float) -> str:
    """`--verify` until it says every partition is completed (exit 0); its output."""
    def done():
        verified = reassign(fleet, "--verify", "--reassignment-json-file", plan)
        assert verified.returncode in (0, 3), verified.stderr
        return verified.returncode == 0 and verified.stdout
    return wait_until(done, timeout_s, "the reassignment to complete")


class GroupReader:
    """A confluent-kafka consumer group member reading in a thread, keeping what it read and,
    from librdkafka's statistics, the node it fetches each partition from."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                                  "statistics.interval.ms": 500, "stats_cb": self._stats})
        self.read: dict[int, list[tuple[int, int]]] = {}
        self.errors: list[str] = []  # what the consumer reported, for a failure's message
        self.fetching_from: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _stats(self, text: str) -> None:
        partitions = orjson.loads(text).get("topics", {}).get(self.topic, {}).get("partitions", {})
        for partition, facts in partitions.items():
            if partition != "-1":
                self.fetching_from[int(partition)] = facts["leader"]

    def _run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self._stop.is_set():
            for message in self.consumer.consume(500, timeout=0.5):
                if message.error():
                    self.errors.append(f"{message.partition()}: {message.error()}")
                else:
                    self.read.setdefault(message.partition(), []).append(
                        (message.offset(), int(message.value())))
        self.consumer.close()

    def start(self) -> GroupReader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def test_bad_plans_are_refused_before_anything_is_written(fleet, zk, tmp_path, capsys):
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
                        )[TOPIC].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, TOPIC, PARTITIONS), 30, "leaders")
    before = zk.get(f"/brokers/topics/{TOPIC}")
    first = replicas_of(zk, TOPIC, 0)

    def refused(text: str, *extra: str) -> str:
        path = tmp_path / "plan.json"
        path.write_text(text)
        code = klog_main(["cluster", "reassign", "--config", str(fleet[0].config), "--execute",
                          "--reassignment-json-file", str(path), *extra])
        assert code == 2
        return capsys.readouterr().err

    assert "is not JSON" in refused("{")
    assert 'no "partitions" list' in refused('{"version":1,"partitions":[]}')
    assert "t-0 is listed more than once" in refused(
        '{"partitions":[{"topic":"t","partition":0,"replicas":[100]},'
        '{"topic":"t","partition":0,"replicas":[200]}]}')
    message = refused(orjson.dumps({"version": 1, "partitions": [
        {"topic": "unknown", "partition": 0, "replicas": [100, 200, 300]},
        {"topic": TOPIC, "partition": 9, "replicas": [100, 200, 300]},
        {"topic": TOPIC, "partition": 0, "replicas": []},
        {"topic": TOPIC, "partition": 1, "replicas": [100, 100, 200]},
        {"topic": TOPIC, "partition": 2, "replicas": [400, 200, 300]},  # 4 is not up yet
        {"topic": TOPIC, "partition": 3, "replicas": [100, 101, 200]},
    ]}).decode())
    for expected in ("topic 'unknown' does not exist", f"{TOPIC}-9: no such partition",
                     f"{TOPIC}-0: the replica list is empty",
                     f"{TOPIC}-1: node(s) [100] listed more than once",
                     f"{TOPIC}-2: node(s) [400] are not live nodes",
                     f"{TOPIC}-3: two replicas on appliance(s) [1]", "nothing was written"):
        assert expected in message, message
    other_disk = tuple(r + 1 if r % 100 == 0 else r - 1 for r in first)
    assert "moving a replica between the disks of one appliance is not supported" in refused(
        orjson.dumps({"partitions": [{"topic": TOPIC, "partition": 0,
                                      "replicas": list(other_disk)}]}).decode())
    with pytest.raises(SystemExit):  # argparse: a throttle must be a positive rate
        refused('{"partitions":[{"topic":"t","partition":0,"replicas":[100]}]}',
                "--throttle", "0")
    assert not zk.exists("/admin/reassign_partitions")
    assert zk.get(f"/brokers/topics/{TOPIC}") == before
    assert config(zk, f"/config/topics/{TOPIC}") == {"min.insync.replicas": "2"}


def plan_for_the_fourth(zk) -> list[tuple[str, int, tuple[int, ...]]]:
    """Appliance 4 takes one replica of each of three partitions, one from each of appliances
    1-3, each time from the partition's leader: leadership moves too (to the new replica,
    first in the target)."""
    entries, taken = [], set()
    for partition in range(PARTITIONS):
        leader = partition_state(zk, TOPIC, partition)["leader"]
        replicas = replicas_of(zk, TOPIC, partition)
        if leader // 100 in taken or len(taken) == 3:
            continue
        taken.add(leader // 100)
        new = 400 + partition % 2  # both disks of the fourth appliance
        entries.append((TOPIC, partition, (new,) + tuple(r for r in replicas if r != leader)))
    assert len(taken) == 3, "the topic's leaders rotate over the three appliances"
    return entries


def test_a_fourth_appliance_takes_its_share_under_load(fleet, zk, tmp_path):
    bootstraps = ",".join(a.bootstrap for a in fleet[:3])
    writer = AckedWriter(bootstraps, TOPIC, PARTITIONS).start()
    reader = GroupReader(bootstraps, TOPIC).start()
    wait_until(lambda: len(writer.acked) >= 2000 and len(reader.read) == PARTITIONS, 90,
               "acknowledgements, and the group reading every partition")
    fleet[3].start(timeout_s=60)
    wait_for_brokers(fleet[0], 8)

    # --generate: a balanced proposal (not executed: it keeps every leader where it is)
    generated = reassign(fleet, "--generate", "--topics", TOPIC, "--appliances", "1,2,3,4")
    assert generated.returncode == 0, generated.stderr
    proposed = orjson.loads(generated.stdout.split(
        "Proposed partition reassignment configuration\n")[1])["partitions"]
    per_appliance: dict[int, int] = {}
    for entry in proposed:
        assert len({r // 100 for r in entry["replicas"]}) == 3
        for r in entry["replicas"]:
            per_appliance[r // 100] = per_appliance.get(r // 100, 0) + 1
    assert per_appliance == {1: 3, 2: 3, 3: 3, 4: 3}

    entries = plan_for_the_fourth(zk)
    before = {p: (replicas_of(zk, TOPIC, p), partition_state(zk, TOPIC, p))
              for _, p, _ in entries}
    plan = write_plan(tmp_path / "plan.json", entries)
    started = time.monotonic()
    executed = reassign(fleet, "--execute", "--reassignment-json-file", plan)
    assert executed.returncode == 0, executed.stderr
    assert "Successfully started partition reassignments for" in executed.stdout
    rollback = orjson.loads(executed.stdout.split("\n\n")[1])["partitions"]
    assert {(e["partition"], tuple(e["replicas"])) for e in rollback} == \
        {(p, replicas) for p, (replicas, _) in before.items()}
    verified = wait_completed(fleet, plan, 90)
    moved_in_s = time.monotonic() - started
    assert verified.count("is completed.") == len(entries)
    acked_at_completion = len(writer.acked)
    wait_until(lambda: len(writer.acked) >= acked_at_completion + 1000, 60,
               "acknowledgements after the move")
    writer.stop()
    assert not writer.errors, writer.errors[:5]

    for _, partition, target in entries:
        state = partition_state(zk, TOPIC, partition)
        old_replicas, old_state = before[partition]
        assert replicas_of(zk, TOPIC, partition) == target
        assert state["leader"] == target[0] and sorted(state["isr"]) == sorted(target)
        assert state["leader_epoch"] == old_state["leader_epoch"] + 1
        removed = next(r for r in old_replicas if r not in target)
        wait_until(lambda p=partition, r=removed: replica_batches(fleet[r // 100 - 1], TOPIC, p)
                   is None, 30, f"the removed replica {removed} of {TOPIC}-{partition} to go")
    raw = assignment(zk, TOPIC)
    assert raw["adding_replicas"] == {} and raw["removing_replicas"] == {}
    wait_until(lambda: not set_aside(fleet, TOPIC), 30, "the removed logs to be deleted")

    for partition in range(PARTITIONS):
        holders = [fleet[r // 100 - 1] for r in replicas_of(zk, TOPIC, partition)]
        wait_until(lambda p=partition, h=holders: len({
            str(replica_batches(a, TOPIC, p)) for a in h}) == 1, 60,
            f"the replicas of {TOPIC}-{partition} to hold the same batches")
        acked = {o: v for (p, o), v in writer.acked.items() if p == partition}
        records = read_partition(fleet[3].bootstrap, TOPIC, partition, max(acked) + 1)
        assert [o for o, _ in records] == list(range(len(records))), "offsets in order, once"
        by_offset = dict(records)
        assert all(by_offset.get(o) == v for o, v in acked.items()), "an acknowledged record"
        values = [v for _, v in records]
        assert values == sorted(set(values)), "per-partition order, no duplicate"

    wait_until(lambda: all(reader.fetching_from.get(p) == partition_state(zk, TOPIC, p)["leader"]
                           for p in range(PARTITIONS)), 30, "the group to fetch from the leaders")
    wanted = set(writer.acked.values())
    try:
        wait_until(lambda: wanted <= {v for got in reader.read.values() for _, v in got}, 60,
                   "the group to read every acknowledged value")
    except AssertionError as exc:  # what the group lacks, and what its consumer said
        missing = wanted - {v for got in reader.read.values() for _, v in got}
        last = {p: got[-1][0] for p, got in reader.read.items()}
        raise AssertionError(f"{exc}: {len(missing)} value(s) unread; last offset read per "
                             f"partition {last}; consumer errors {reader.errors[-10:]}"
                             ) from None
    reader.stop()
    for partition, got in reader.read.items():
        offsets = [o for o, _ in got]
        assert offsets == sorted(set(offsets)), f"the group read {TOPIC}-{partition} in order"
    print(f"\nunthrottled move of {len(entries)} partitions under load: {moved_in_s:.1f} s")


def test_a_throttled_move_copies_within_its_rate_through_a_controller_failover(fleet, zk,
                                                                              tmp_path):
    """The partition of `slow` that has a replica on the controller's appliance gets a new
    replica on the one appliance without it, throttled; the controller's appliance is killed
    (kill -9) midway and started again: another controller finishes the move."""
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic(SLOW, 2, 3, config={"min.insync.replicas": "2"})]
                        )[SLOW].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, SLOW, 2), 30, "leaders")
    controller, epoch = controller_and_epoch(zk)
    partition = next(p for p in (0, 1)
                     if controller in {r // 100 for r in replicas_of(zk, SLOW, p)})
    replicas = replicas_of(zk, SLOW, partition)
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "acks": "all",
                         "linger.ms": 20, "batch.size": 64 * 1024})
    count = SLOW_BYTES // 4000
    for i in range(count):
        producer.produce(SLOW, f"{i:08d}".encode() + b" " * 3992, partition=partition)
        producer.poll(0)
    assert producer.flush(60) == 0
    missing = next(a for a in (1, 2, 3, 4) if a not in {r // 100 for r in replicas})
    dropped = next(r for r in replicas if r // 100 != controller)
    added = missing * 100
    target = (added,) + tuple(r for r in replicas if r != dropped)
    plan = write_plan(tmp_path / "slow.json", [(SLOW, partition, target)])
    holder = fleet[next(r for r in target if r // 100 not in (controller, missing)) // 100 - 1]
    total = replica_bytes(holder, SLOW, partition)

    executed = reassign(fleet, "--execute", "--reassignment-json-file", plan,
                        "--throttle", str(THROTTLE))
    assert executed.returncode == 0, executed.stderr
    assert f"throttle limit was set to {THROTTLE} B/s" in executed.stdout
    assert config(zk, f"/config/topics/{SLOW}")["follower.replication.throttled.replicas"] == \
        f"{partition}:{added}"
    for node in set(replicas) | {added}:
        assert config(zk, f"/config/brokers/{node}")["follower.replication.throttled.rate"] == \
            str(THROTTLE)

    samples: list[tuple[float, int]] = []  # (time, bytes) of the new replica while it copies
    victim = fleet[controller - 1]

    def copied() -> bool:
        got = replica_bytes(fleet[missing - 1], SLOW, partition) or 0
        samples.append((time.monotonic(), got))
        if got >= total // 4 and victim.process.poll() is None:
            kill_appliance(victim)  # the controller, midway through the copy
        return got >= total
    wait_until(copied, 120, "the new replica to copy the partition")
    assert victim.process.poll() is not None, "the copy ended before the controller was killed"
    wait_until(lambda: controller_and_epoch(zk)[0] not in (-1, controller), SESSION_MS / 1000 + 30,
               "another appliance to become the controller")
    assert controller_and_epoch(zk)[1] > epoch
    victim.start(timeout_s=60)
    verified = wait_completed(fleet, plan, 90)
    assert "Clearing broker-level throttles on brokers" in verified
    assert f"Clearing topic-level throttles on topic {SLOW}" in verified
    assert "follower.replication.throttled.replicas" not in config(zk, f"/config/topics/{SLOW}")
    for node in set(replicas) | {added}:
        assert "follower.replication.throttled.rate" not in config(zk, f"/config/brokers/{node}")

    first = next(i for i, (_, got) in enumerate(samples) if got > 0)
    (t0, b0), (t1, b1) = samples[first], samples[-1]
    rate = (b1 - b0) / (t1 - t0)
    print(f"\nthrottled copy: {b1 - b0} bytes in {t1 - t0:.1f} s = {rate / 1e6:.2f} MB/s "
          f"(throttle {THROTTLE / 1e6:.2f} MB/s)")
    # the bucket holds a quarter second of the rate, and a fetch may bring one batch more
    assert rate <= THROTTLE * 1.2

    assert replicas_of(zk, SLOW, partition) == target
    wait_until(lambda: replica_batches(fleet[dropped // 100 - 1], SLOW, partition) is None
               and not set_aside(fleet, SLOW), 30, "the removed replica to go")
    wait_until(lambda: len({str(replica_batches(fleet[r // 100 - 1], SLOW, partition))
                            for r in target}) == 1, 60, "the replicas to hold the same batches")
    records = read_partition(fleet[missing - 1].bootstrap, SLOW, partition, count)
    assert records == [(i, i) for i in range(count)]  # (offset, value): all, in order, once


def test_cancel_moves_a_partition_in_flight_back(fleet, zk, tmp_path):
    """A move throttled to a crawl is cancelled: the replica it was adding is dropped (and its
    log deleted), the assignment is the original again, and the throttle is gone."""
    admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
    admin.create_topics([NewTopic("cancelled", 1, 3, config={"min.insync.replicas": "2"})]
                        )["cancelled"].result(30)
    wait_until(lambda: led(fleet[0].bootstrap, "cancelled", 1), 30, "a leader")
    producer = Producer({"bootstrap.servers": fleet[0].bootstrap, "acks": "all",
                         "batch.size": 16 * 1024})
    for i in range(200):
        producer.produce("cancelled", f"{i:08d}".encode() + b" " * 1992, partition=0)
    assert producer.flush(60) == 0
    original = replicas_of(zk, "cancelled", 0)
    missing = next(a for a in (1, 2, 3, 4) if a not in {r // 100 for r in original})
    added = missing * 100 + 1
    plan = write_plan(tmp_path / "crawl.json", [("cancelled", 0, (added,) + original[1:])])
    executed = reassign(fleet, "--execute", "--reassignment-json-file", plan,
                        "--throttle", "20000")  # 400 KB at 20 KB/s: 20 s
    assert executed.returncode == 0, executed.stderr
    wait_until(lambda: (replica_bytes(fleet[missing - 1], "cancelled", 0) or 0) > 0, 30,
               "the copy to start")
    verified = reassign(fleet, "--verify", "--reassignment-json-file", plan)
    assert verified.returncode == 3 and "is still in progress" in verified.stdout
    assert "Clearing" not in verified.stdout  # the throttle stays while it moves

    cancelled = reassign(fleet, "--cancel", "--reassignment-json-file", plan)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "Successfully cancelled partition reassignments for: cancelled-0" in cancelled.stdout
    assert "Clearing topic-level throttles on topic cancelled" in cancelled.stdout
    # the original replicas; in the order the move kept them (Kafka's too: the topic znode
    # holds target + original, and the original is that less what was being added)
    wait_until(lambda: sorted(replicas_of(zk, "cancelled", 0)) == sorted(original) and
               assignment(zk, "cancelled")["adding_replicas"] == {}, 30, "the original replicas")
    wait_until(lambda: replica_batches(fleet[missing - 1], "cancelled", 0) is None
               and not set_aside(fleet, "cancelled"), 30, "the added replica to go")
    assert added not in partition_state(zk, "cancelled", 0)["isr"]
    assert "follower.replication.throttled.replicas" not in config(zk, "/config/topics/cancelled")
    again = reassign(fleet, "--verify", "--reassignment-json-file", plan)
    assert again.returncode == 0 and "failed: its replicas are" in again.stdout
