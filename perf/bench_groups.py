"""Consumer-group benchmark (issue 6), each figure beside a baseline from the same run.

- Commit rate of one coordinator: connections pipelining OffsetCommit requests (3 partitions
  each, simple commits into empty groups that all live on the one worker) for a fixed time;
  commits per second and the worker's CPU seconds per 10k commits. Baseline: the same
  connections pipelining acks=all Produce requests of one 100-byte record: the same durable
  append and group commit, without the coordinator's bookkeeping.
- Rebalance time of a 10-member group after one member leaves: from the member's close()
  (a LeaveGroup) until each of the nine others has its new assignment (their on_assign
  callbacks). klog consumers, and librdkafka (confluent-kafka) consumers as the baseline.

Run: .venv/bin/python perf/bench_groups.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import multiprocess  # noqa: E402

from klog.protocol.apis import find_coordinator, offset_commit, produce  # noqa: E402
from klog.protocol.records import build_batch  # noqa: E402
from perf.bench_broker import cpu_seconds  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.interop.helpers import create_topic  # noqa: E402
from tests.worker.raw import RawClient  # noqa: E402

SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


# -- commit rate ---------------------------------------------------------------------------------

def _commit_request(group: str, topic: str, offset: int):
    return dict(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None, retention_time_ms=-1, topics=[
                    offset_commit.OffsetCommitRequestTopic(name=topic, partitions=[
                        offset_commit.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=offset,
                            committed_leader_epoch=-1, committed_metadata="")
                        for p in range(3)])])


def _produce_request(topic: str):
    batch = build_batch([(int(time.time() * 1000), None, b"x" * 100, [])])
    return dict(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        produce.TopicProduceData(name=topic, partition_data=[
            produce.PartitionProduceData(index=0, records=batch)])])


def _pipeline(args) -> int:
    """One connection keeping ``depth`` requests in flight for ``seconds``; returns answers."""
    port, kind, index, seconds, depth = args
    client = RawClient(port)
    group = f"bench-{index}"
    sent = answered = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or answered < sent:
        while sent - answered < depth and time.monotonic() < deadline:
            if kind == "commit":
                client.send(offset_commit, 7, **_commit_request(group, "target", sent))
            else:
                client.send(produce, 8, **_produce_request("target"))
            sent += 1
        answer = client.receive()
        codes = ([p.error_code for t in answer.topics for p in t.partitions] if kind == "commit"
                 else [p.error_code for t in answer.responses for p in t.partition_responses])
        assert set(codes) == {0}, codes
        answered += 1
    client.close()
    return answered


def commit_rate(seconds: float, connections: int, depth: int) -> dict[str, tuple[float, float]]:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        appliance = Appliance(Path(tmp), log_dirs=1, settings=SETTINGS).start()
        try:
            create_topic(appliance.bootstrap, "target", 3)
            client = RawClient(appliance.port)
            client.call(find_coordinator, 2, key="bench-0", key_type=0)  # creates the topic
            client.close()
            pid = appliance.worker_pid(0)
            context = multiprocess.get_context("fork")
            for kind in ("commit", "produce"):
                jobs = [(appliance.port, kind, i, seconds, depth) for i in range(connections)]
                cpu, start = cpu_seconds(pid), time.perf_counter()
                with context.Pool(connections) as pool:
                    total = sum(pool.map(_pipeline, jobs))
                elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu
                results[kind] = (total / elapsed, cpu / total * 10_000)
        finally:
            appliance.stop()
    return results


# -- rebalance time ------------------------------------------------------------------------------

def _member(args):
    client, bootstrap, topic, index, events, stop, leave_flag = args
    if client == "klog":
        import klog
        consumer = klog.Consumer(bootstrap_servers=bootstrap, group_id="rebalance",
                                 session_timeout_ms=10_000, heartbeat_interval_ms=500)
        consumer.subscribe([topic], on_assign=lambda ps: events.put(
            (index, time.monotonic(), len(ps))))
        while not stop.is_set():
            consumer.poll(timeout_ms=50)
            if index == 0 and Path(leave_flag).exists():
                break
        consumer.close()
        events.put((index, time.monotonic(), "closed"))
    else:
        import confluent_kafka as ck
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "rebalance",
                                "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
        consumer.subscribe([topic], on_assign=lambda c, ps: events.put(
            (index, time.monotonic(), len(ps))))
        while not stop.is_set():
            consumer.poll(0.05)
            if index == 0 and Path(leave_flag).exists():
                break
        consumer.close()
        events.put((index, time.monotonic(), "closed"))


def rebalance_time(client: str, members: int, rounds: int) -> list[float]:
    """Seconds from member 0's close() to the last new assignment among the others."""
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            appliance = Appliance(Path(tmp), log_dirs=2, settings=SETTINGS).start()
            context = multiprocess.get_context("fork")
            manager = context.Manager()
            events, stop = manager.Queue(), manager.Event()
            try:
                create_topic(appliance.bootstrap, "rebalance", 2 * members)
                flag = Path(tmp) / "leave"
                processes = [context.Process(target=_member, args=(
                    (client, appliance.bootstrap, "rebalance", i, events, stop, str(flag)),))
                    for i in range(members)]
                for p in processes:
                    p.start()
                latest: dict[int, tuple[float, object]] = {}
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:  # stable: everyone holds two partitions
                    while not events.empty():
                        index, t, what = events.get()
                        latest[index] = (t, what)
                    if len(latest) == members and all(w == 2 for _, w in latest.values()):
                        break
                    time.sleep(0.05)
                time.sleep(1.0)
                flag.touch()
                closed_at, assigned = None, {}
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and (closed_at is None or
                                                        len(assigned) < members - 1):
                    index, t, what = events.get(timeout=60)
                    if what == "closed" and index == 0:
                        closed_at = t
                    elif index != 0 and closed_at is not None and what != "closed":
                        assigned[index] = t
                times.append(max(assigned.values()) - closed_at)
            finally:
                stop.set()
                for p in processes:
                    p.join(30)
                manager.shutdown()
                appliance.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seconds, rounds = (2.0, 1) if args.quick else (10.0, 3)
    rates = commit_rate(seconds, connections=4, depth=16)
    print(f"{'commit rate, one coordinator (4 connections x 16 in flight)':64} "
          f"{'per s':>10} {'CPU s / 10k':>12}")
    for kind, label in (("commit", "OffsetCommit, 3 partitions each"),
                        ("produce", "baseline: acks=all Produce, 1 record each")):
        rate, cpu = rates[kind]
        print(f"  {label:62} {rate:10.0f} {cpu:12.2f}")
    print(f"\n{'rebalance after one of 10 members leaves (s)':64} {'median':>10} {'max':>8}")
    for client in ("klog", "confluent"):
        times = rebalance_time(client, 10, rounds)
        print(f"  {client:62} {statistics.median(times):10.3f} {max(times):8.3f}")


if __name__ == "__main__":
    main()
