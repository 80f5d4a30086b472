"""A fleet pass and the controller's writes with a few hundred partitions (issue 12), on a real
three-server ZooKeeper on this host, each figure beside its baseline of the same run.

- A pass: building the fleet's snapshot through `WatchedReads` (cluster/watched_reads.py)
  with nothing changed, and after one partition state changed, beside a full re-read of
  every znode (`read_fleet`, what every pass did before): ms and ZooKeeper requests.
  Every appliance runs a pass after each watch that fires, and a leadership change reaches
  its workers only after one.
- Settling after a node's death: the controller rewrites the state of every partition the
  node led or followed; pipelined fenced multis (`write_states`, one round trip) beside one
  fenced multi at a time (a round trip each, as before).

Run: .venv/bin/python perf/bench_fleet_pass.py [--quick]
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

from cluster import znodes  # noqa: E402
from cluster.controller import FencedWriter, elect, write_states  # noqa: E402
from cluster.fleet_view import read_fleet, read_snapshot  # noqa: E402
from cluster.session import Session  # noqa: E402
from cluster.watched_reads import WatchedReads  # noqa: E402
from tests.fleet.zookeeper import Ensemble  # noqa: E402

NODES = (100, 101, 200, 201, 300, 301)


def populate(session: Session, topics: int, partitions: int) -> None:
    for root in znodes.PERSISTENT_ROOTS:
        session.call("ensure_path", root)
    for node in NODES:
        session.call("create", znodes.broker_path(node), znodes.BrokerRegistration(
            node, "127.0.0.1", 9000 + node, f"rack-{node // 100}").encode(), ephemeral=True)
    for broker_id in (1, 2, 3):
        session.call("create", znodes.appliance_path(broker_id), znodes.ApplianceRegistration(
            broker_id, f"rack-{broker_id}", "127.0.0.1").encode(), ephemeral=True)
    for t in range(topics):
        name = f"topic-{t}"
        replicas = {p: tuple(NODES[(p + i * 2) % 6] for i in range(3)) for p in range(partitions)}
        session.call("create", znodes.topic_path(name), znodes.TopicAssignment(replicas).encode())
        session.call("create", znodes.topic_config_path(name), znodes.TopicConfig(
            {"min.insync.replicas": "2"}).encode(), makepath=True)
        for p, r in replicas.items():
            session.call("create", znodes.state_path(name, p),
                         znodes.PartitionState(r[0], 0, r, 1).encode(), makepath=True)


def timed(action, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def passes(session: Session, rounds: int) -> None:
    reads = WatchedReads(session)
    read_snapshot(reads)
    full = timed(lambda: read_fleet(session, None), rounds)
    asked = reads.requests
    unchanged = timed(lambda: (reads.catch_up(), read_snapshot(reads)), rounds)
    unchanged_requests = (reads.requests - asked) / rounds
    one = []
    asked = reads.requests
    for i in range(rounds):
        path = znodes.state_path("topic-0", 0)
        session.call("set", path, znodes.PartitionState(100, i + 1, (100, 200, 300), 1).encode())
        start = time.perf_counter()
        while True:  # until the watch has told the cache (our own write: catch_up suffices)
            reads.catch_up()
            if read_snapshot(reads).topics["topic-0"].states[0][0].leader_epoch == i + 1:
                break
        one.append((time.perf_counter() - start) * 1000)
    one_requests = (reads.requests - asked) / rounds
    reads.invalidate()
    asked = reads.requests
    read_snapshot(reads)
    requests = reads.requests - asked
    print(f"a pass over {count_states(session)} partitions: full re-read median "
          f"{statistics.median(full):.1f} ms ({requests} requests, every node); through the "
          f"watches' cache, nothing changed: {statistics.median(unchanged):.2f} ms "
          f"({unchanged_requests:.0f} requests), one state changed: "
          f"{statistics.median(one):.2f} ms ({one_requests:.0f} request(s))")


def count_states(session: Session) -> int:
    return sum(len(t.states) for t in read_fleet(session, None).topics.values())


def settling(session: Session, rounds: int) -> None:
    """Node 100 died: every state naming it is rewritten (leader moved, or ISR shrunk)."""
    election = elect(session, 1)
    writer = FencedWriter(session, election)
    one_by_one, pipelined, writes = [], [], 0
    for i in range(rounds):
        snapshot = read_fleet(session, None)
        changes = []
        for name, topic in snapshot.topics.items():
            for p, (state, version) in topic.states.items():
                if 100 in state.isr:
                    isr = tuple(r for r in state.isr if r != 100)
                    leader = isr[0] if state.leader == 100 else state.leader
                    new = znodes.PartitionState(leader, state.leader_epoch + 1, isr, 1)
                    changes.append((znodes.state_path(name, p), new, version))
        writes = len(changes)
        if i % 2 == 0:
            start = time.perf_counter()
            for path, state, version in changes:  # as reconcile wrote before
                writer.write(lambda tx, p=path, s=state, v=version: tx.set_data(
                    p, s.encode(), version=v))
            one_by_one.append((time.perf_counter() - start) * 1000)
        else:
            start = time.perf_counter()
            assert all(e is None for e in write_states(writer, changes))
            pipelined.append((time.perf_counter() - start) * 1000)
        restore = [(path, znodes.PartitionState(100, s.leader_epoch + 1, (100,) + s.isr, 1),
                    v + 1) for path, s, v in changes]
        assert all(e is None for e in write_states(writer, restore))
    print(f"settling after a node's death ({writes} partition states): pipelined fenced "
          f"multis median {statistics.median(pipelined):.0f} ms; one fenced multi at a time "
          f"median {statistics.median(one_by_one):.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    topics, partitions = (10, 16) if args.quick else (20, 16)
    rounds = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        ensemble = Ensemble(Path(tmp) / "zk")
        ensemble.start()
        session = Session(f"{ensemble.connect}/klog-bench-pass", session_timeout_ms=6000,
                          connection_timeout_ms=10_000)
        try:
            session.start()
            populate(session, topics, partitions)
            passes(session, rounds)
            settling(session, max(2, rounds // 2) * 2)
        finally:
            session.stop()
            ensemble.close()


if __name__ == "__main__":
    main()
