"""Replication benchmark (issue 12), on one host, each figure beside its baseline of the run.

Three appliances (two workers each) and a three-server ZooKeeper on this host:
- acks=all produce with confluent-kafka (idempotent, 200-byte messages, 6 partitions):
  throughput (msg/s) and per-message latency p50/p99 (one message in flight at a time),
  replication factor 3 (min.insync.replicas=2) vs replication factor 1 in the same fleet.
  Every copy shares this host's two cores and its disk, so factor 3 pays three appends (and
  the followers' fetches) on the same CPUs: an upper bound of the cost, not a fleet's.
- failover: kill -9 of the appliance leading partition 0 of the factor-3 topic, until the
  producer's next acknowledgement of a message to that partition (s); the ZooKeeper
  session timeout (the time before the fleet may declare the leader dead) is its floor.
  Split at the moment the controller wrote the new leader (the state znode's mtime): before
  it, the session's expiry; after it, the fleet telling the new leader and the producer
  finding it (librdkafka asks for metadata about once a second meanwhile).
- follower catch-up: a follower's appliance is stopped while its leader takes some hundred
  MB, then started; the rate at which its replica copies the leader's log (from its first
  copied byte to the leader's log end, read from its shm region), beside a raw loop that
  sendfiles the same segment files over a loopback TCP connection into a file: the floor of
  what a follower's fetch, append and publication could cost. The raw loop runs just before
  and just after the catch-up, each time from a quiet host (the other follower caught up,
  no write-back under way) and twice, the second pass timed (`raw_sendfile_rate` says why);
  the ratio is to the mean of the two timed passes. One partition unless
  `--catchup-partitions N` (`catch_up` says how the bytes then spread). With
  `--idle-partitions N` the fleet also holds a topic of N idle partitions: a restarted broker
  rejoins each of their ISRs while it catches up, as one in a real fleet does. Rates on this
  shared host
  swing with the load; the CPU seconds spent per 100 MB (the follower's and the leader's
  worker processes; both ends of the raw loop) vary much less. The script watches the
  follower's progress in its shm region every 10 ms and prints what the watch cost: it
  shares the two cores with what it times.

Run: .venv/bin/python perf/bench_replication.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

from appliance.config import load_config  # noqa: E402
from appliance.shm.appliance_region import ApplianceRegion  # noqa: E402
from appliance.workers.replication.fetch_settings import PIPELINE_ENV  # noqa: E402
from tests.conftest import Appliance  # noqa: E402
from tests.fleet.zookeeper import Ensemble  # noqa: E402

SESSION_MS = 6000
# Catch-up rounds alternate "before" (the follower's fetcher as it was: one fetch in flight,
# the pipelining off by its environment switch) and "after" (the fetcher as it is, with
# these settings over the defaults, none unless --after names some).
AFTER = ""
CHROOT = "/klog-bench-repl"


def start_fleet(root: Path, connect: str) -> list[Appliance]:
    return [Appliance(root / f"a{b}", log_dirs=2, settings={
        "broker.id": str(b), "zookeeper.connect": connect,
        "zookeeper.session.timeout.ms": str(SESSION_MS)}).start(timeout_s=60)
        for b in (1, 2, 3)]


@contextlib.contextmanager
def running_fleet(root: Path, topics: list[NewTopic]):
    """A three-server ZooKeeper and three appliances under `root`, `topics` created and led:
    (ensemble, fleet); everything stopped on the way out."""
    ensemble = Ensemble(root / "zk")
    ensemble.start()
    fleet = []
    try:
        fleet = start_fleet(root, f"{ensemble.connect}{CHROOT}")
        admin = AdminClient({"bootstrap.servers": fleet[0].bootstrap})
        for topic in topics:
            admin.create_topics([topic])[topic.topic].result(30)
        for topic in topics:
            wait_led(fleet[0].bootstrap, topic.topic, topic.num_partitions)
        yield ensemble, fleet
    finally:
        for appliance in fleet:
            appliance.stop()
        ensemble.close()


def wait_led(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found and len(found.partitions) == partitions and all(
                p.leader >= 0 for p in found.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} never got its leaders")


def producer(bootstrap: str, **extra) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "acks": "all", **extra})


def throughput(bootstrap: str, topic: str, count: int) -> float:
    p = producer(bootstrap, **{"linger.ms": 5})
    value = b"x" * 200
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return count / (time.perf_counter() - start)


def latencies_ms(bootstrap: str, topic: str, count: int) -> tuple[float, float]:
    p = producer(bootstrap, **{"linger.ms": 0})
    samples = []
    for i in range(count):
        start = time.perf_counter()
        p.produce(topic, b"x" * 200, partition=i % 6)
        assert p.flush(30) == 0
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def failover_s(fleet: list[Appliance], zk, topic: str) -> float:
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    leader = orjson.loads(data)["leader"]
    victim = fleet[leader // 100 - 1]
    others = ",".join(a.bootstrap for a in fleet if a is not victim)
    p = producer(others, **{"linger.ms": 0, "message.timeout.ms": 120_000})
    p.produce(topic, b"warm", partition=0)
    assert p.flush(30) == 0
    pids = [pid for pid in victim.pids().values() if pid > 0]
    acked = []
    killed_at, killed_wall = time.perf_counter(), time.time()
    victim.kill()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    p.produce(topic, b"after", partition=0,
              on_delivery=lambda err, msg: acked.append((err, time.perf_counter())))
    while not acked:
        p.poll(0.01)
    err, at = acked[0]
    assert err is None, err
    took = at - killed_at
    _, stat = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    elected = stat.mtime / 1000 - killed_wall  # ZooKeeper runs on this host: same clock
    victim.start(timeout_s=60)
    return took, elected


def replica_view(appliance: Appliance, topic: str, partition: int):
    """The partition as the appliance's shm region shows it (None: not there yet)."""
    with ReplicaWatch(appliance, topic, partition) as watch:
        return watch.view()


class ReplicaWatch:
    """One partition's view in an appliance's shm region, read as often as asked. The region
    is attached once and the partition's slot looked up once: a watch that attached, parsed
    the config and snapshotted every partition on each 5 ms poll took two thirds of a core
    of this 2-core host, beside the follower it was timing."""

    def __init__(self, appliance: Appliance, topic: str, partition: int):
        self.appliance, self.key = appliance, (topic, partition)
        self.region = None
        self.slot = None

    def view(self):
        """The partition's view, or None while the region or the partition is not there."""
        if self.region is None:
            try:
                self.region = ApplianceRegion.open_status(load_config(self.appliance.config))
            except Exception:  # noqa: BLE001 - not started yet
                return None
        table = self.region.region.partitions
        if self.slot is None:
            self.slot = table.find(*self.key)
            if self.slot is None:
                return None
        view = table.read_partition(self.slot)
        return view if view.log_end_offset >= 0 else None

    def __enter__(self) -> ReplicaWatch:
        return self

    def __exit__(self, *exc) -> None:
        if self.region is not None:
            self.region.close()


def cpu_s(appliance: Appliance, user_only: bool = False) -> float:
    """CPU seconds (user + system, or user only) its worker processes have used."""
    total = 0.0
    for pid in appliance.pids().values():
        with contextlib.suppress(OSError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + (0 if user_only else int(fields[12]))) / os.sysconf(
                "SC_CLK_TCK")
    return total


def restart_with(appliance: Appliance, settings: dict[str, str],
                 env: dict[str, str] | None = None) -> None:
    """Start `appliance` again with `settings` over its own (a variant's replica fetch keys;
    an empty value removes the key) and `env` in its environment."""
    for key, value in settings.items():
        if value:
            appliance.settings[key] = value
        else:
            appliance.settings.pop(key, None)
    appliance.config.write_text("".join(f"{k}={v}\n" for k, v in appliance.settings.items()))
    appliance.start(timeout_s=60, env=env)


def catch_up(fleet: list[Appliance], zk, bootstrap: str, megabytes: int, topic: str = "catchup",
             variant: tuple[dict, dict] = ({}, {}), profile: str = "",
             partitions: int = 1) -> dict:
    """Bytes/s copied by a restarted follower (started with `variant` over its settings) and
    of the raw sendfile loop, the bytes, and the CPU seconds per 100 MB of each side.

    `partitions` > 1: the topic gets that many partitions. The appliance that leads the most
    of them (a node id is its broker.id times 100 plus the worker's index) is the leader,
    and the megabytes go to its partitions only, round robin: a restarted broker copies many
    partitions from each leader at once, up to `replica.fetch.response.max.bytes` per fetch.
    The raw loop sends their segment files one after the other over its one connection.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "1"})]
                        )[topic].result(30)
    wait_led(bootstrap, topic, partitions)
    leaders = {}  # appliance (broker.id) -> the partitions one of its workers leads
    for index in range(partitions):
        data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{index}/state")
        leaders.setdefault(orjson.loads(data)["leader"] // 100, []).append(index)
    broker, led = max(leaders.items(), key=lambda item: len(item[1]))
    leader = fleet[broker - 1]
    follower = next(a for a in fleet if a is not leader)
    follower.stop()
    p = Producer({"bootstrap.servers": leader.bootstrap, "acks": 1, "linger.ms": 20,
                  "batch.size": 1_000_000, "compression.type": "none"})
    value = os.urandom(1000)
    for i in range(megabytes * 1000):
        while True:
            try:
                p.produce(topic, value, partition=led[i % len(led)])
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0
    targets = {index: replica_view(leader, topic, index) for index in led}
    # the raw loop runs just before the catch-up and just after it, as the page cache's
    # memory state drifts over a run. Each timed side starts on a quiet host: the running
    # follower has the leader's log end (with acks=1 it is still copying when flush()
    # returns) and no write-back is under way.
    for index, target in targets.items():
        settle(fleet, leader, follower, topic, target.log_end_offset, index)
    os.sync()
    raw_before, raw_cpu_before, cold_before = raw_sendfile_rate(leader, topic, led)
    restart_with(follower, *variant)
    cpu_before = cpu_s(follower), cpu_s(leader), cpu_s(follower, True), cpu_s(leader, True)
    spy = str(Path(sys.executable).parent / "py-spy")

    def profiler(out: str, pid: int) -> list[str]:  # perf for a .data path, else py-spy
        if profile.endswith(".data"):
            return ["perf", "record", "-g", "-F", "499", "-o", f"{out}.data", "-p", str(pid)]
        return [spy, "record", "-o", f"{out}.txt", "-f", "raw", "-r", "100", "-p", str(pid)]
    spies = [subprocess.Popen(profiler(f"{profile.removesuffix('.data')}-{side}-{name}", pid),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for side, appliance in (("follower", follower), ("leader", leader))
             for name, pid in appliance.pids().items() if profile and pid > 0]
    first_at = None
    start_ends: dict[int, int] = {}
    watch_before = resource.getrusage(resource.RUSAGE_SELF)
    with contextlib.ExitStack() as stack:
        watches = {index: stack.enter_context(ReplicaWatch(follower, topic, index))
                   for index in led}
        while True:
            views = {index: watch.view() for index, watch in watches.items()}
            now = time.perf_counter()
            if all(view is not None and view.log_end_offset >= 0 for view in views.values()):
                if not start_ends:
                    start_ends = {i: view.log_end_offset for i, view in views.items()}
                elif first_at is None and any(view.log_end_offset > start_ends[i]
                                              for i, view in views.items()):
                    first_at, first_bytes = now, sum(v.size_bytes for v in views.values())
                if all(view.log_end_offset >= targets[i].log_end_offset
                       for i, view in views.items()):
                    copied = sum(v.size_bytes for v in views.values()) - (
                        first_bytes if first_at else 0)
                    took = now - (first_at or now)
                    break
            time.sleep(0.01)
    watch_after = resource.getrusage(resource.RUSAGE_SELF)
    total_bytes = sum(target.size_bytes for target in targets.values())
    hundreds = total_bytes / 100e6
    watch_cpu = (watch_after.ru_utime + watch_after.ru_stime - watch_before.ru_utime
                 - watch_before.ru_stime) / hundreds
    follower_cpu = (cpu_s(follower) - cpu_before[0]) / hundreds
    leader_cpu = (cpu_s(leader) - cpu_before[1]) / hundreds
    follower_user = (cpu_s(follower, True) - cpu_before[2]) / hundreds
    leader_user = (cpu_s(leader, True) - cpu_before[3]) / hundreds
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    for index, target in targets.items():
        settle(fleet, leader, None, topic, target.log_end_offset, index)
    os.sync()
    raw_after, raw_cpu_after, cold_after = raw_sendfile_rate(leader, topic, led)
    raw, raw_cpu = (raw_before + raw_after) / 2, (raw_cpu_before + raw_cpu_after) / 2
    return {"rate": copied / took if took > 0 else float("inf"), "raw": raw,
            "raw_before": raw_before, "raw_after": raw_after,
            "raw_cold": (cold_before + cold_after) / 2,
            "bytes": total_bytes, "partitions": len(led),
            "follower_cpu": follower_cpu, "leader_cpu": leader_cpu,
            "follower_user": follower_user, "leader_user": leader_user,
            "raw_cpu": raw_cpu / hundreds, "watch_cpu": watch_cpu}


def settle(fleet: list[Appliance], leader: Appliance, stopped: Appliance | None, topic: str,
           end: int, partition: int = 0) -> None:
    """Wait until every running replica of the partition but the leader's has `end` as its
    log end: with the write-back of every dirty page after it (os.sync), the state each timed
    side starts from."""
    deadline = time.monotonic() + 120
    for appliance in fleet:
        if appliance is leader or appliance is stopped:
            continue
        with ReplicaWatch(appliance, topic, partition) as watch:
            while (view := watch.view()) is None or view.log_end_offset < end:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a replica of {topic}-{partition} never reached {end}")
                time.sleep(0.05)


def raw_sendfile_rate(appliance: Appliance, topic: str, partitions: list[int]
                      ) -> tuple[float, float, float]:
    """sendfile of the partition's segment files over loopback TCP into a file, written as a
    follower writes its segment (a preallocated file, pwrite from one reused buffer): (bytes/s,
    CPU seconds of both ends, bytes/s of the untimed first pass).

    Two passes, the second timed. On this VM a write into memory the guest has not touched
    lately (freed pages go back to the host at once: virtio-balloon free page reporting) costs
    the guest a host fault per page: a first pass after a round's fresh data ran at 310-460
    MB/s and 1.2 CPU s per 517 MB, the pass right after it at 2.2-3.4 GB/s and 0.25 s (the
    sendfile side alone ran at 2.4-3.3 GB/s either way). Which timed side happened to meet
    that cost decided the ratio (0.3 to 5 in one evening), so the floor is the warm pass: the
    copy at its best."""
    files = [p for partition in partitions for p in sorted(
        p for d in appliance.log_dirs for p in (Path(d) / f"{topic}-{partition}").glob("*.log"))]
    out_path = Path(appliance.log_dirs[0]).parent / "raw-copy.bin"
    first, _ = raw_copy(files, out_path)
    rate, cpu = raw_copy(files, out_path)
    return rate, cpu, first


def raw_copy(files: list[Path], out_path: Path) -> tuple[float, float]:
    """One pass of the raw loop: (bytes/s, CPU seconds of both ends)."""
    import socket
    import threading
    expected = sum(p.stat().st_size for p in files)
    listener = socket.create_server(("127.0.0.1", 0))
    received = []

    def receive() -> None:
        conn, _ = listener.accept()
        total = 0
        buffer = bytearray(1 << 20)
        view = memoryview(buffer)
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.posix_fallocate(fd, 0, expected)
            with conn:
                while n := conn.recv_into(buffer):
                    os.pwrite(fd, view[:n], total)
                    total += n
        finally:
            os.close(fd)
        received.append(total)

    thread = threading.Thread(target=receive)
    before = resource.getrusage(resource.RUSAGE_SELF)
    thread.start()
    start = time.perf_counter()
    with socket.create_connection(listener.getsockname()) as sock:
        for path in files:
            with open(path, "rb") as f:
                size, offset = os.fstat(f.fileno()).st_size, 0
                while offset < size:
                    offset += os.sendfile(sock.fileno(), f.fileno(), offset, size - offset)
    thread.join()
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    listener.close()
    out_path.unlink()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return received[0] / took, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="acks,catchup,failover",
                        help="comma-separated sections: acks, catchup, failover")
    parser.add_argument("--catchup-mb", type=int, default=0)
    parser.add_argument("--catchup-partitions", type=int, default=1,
                        help="partitions of the catch-up topic (catch_up says how they are used)")
    parser.add_argument("--idle-partitions", type=int, default=0,
                        help="a topic of this many idle partitions (factor 3) in the fleet: "
                        "the restarted follower rejoins each ISR during its catch-up")
    parser.add_argument("--variants", type=int, default=2,
                        help="catch-up variants per round (1: the first of the round's order)")
    parser.add_argument("--variant", choices=("before", "after"), default=None,
                        help="catch-up rounds of this variant only")
    parser.add_argument("--after", default=AFTER, help="the follower's settings of 'after'")
    parser.add_argument("--rounds", type=int, default=2,
                        help="catch-up rounds, each before and after (alternating order)")
    parser.add_argument("--profile", default="",
                        help="profile path prefix of each side's workers during catch-up: "
                        "py-spy's raw samples, or perf's with a .data suffix")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    count = 20_000 if args.quick else 200_000
    samples = 200 if args.quick else 2000
    kills = 1 if args.quick else 20
    topics = [NewTopic("rf1", 6, 1), NewTopic("rf3", 6, 3, config={"min.insync.replicas": "2"})]
    if args.idle_partitions:  # small segments: each replica preallocates one (README)
        topics.append(NewTopic("idle", args.idle_partitions, 3, config={
            "segment.bytes": str(1 << 20), "segment.index.bytes": str(64 << 10)}))
    with tempfile.TemporaryDirectory() as tmp, running_fleet(Path(tmp), topics) as (
            ensemble, fleet):
        bootstrap = ",".join(a.bootstrap for a in fleet)
        for topic in ("rf1", "rf3") if "acks" in sections else ():
            rate = throughput(bootstrap, topic, count)
            p50, p99 = latencies_ms(bootstrap, topic, samples)
            print(f"acks=all {topic}: {rate:,.0f} msg/s ({count} x 200 B); "
                  f"latency p50 {p50:.2f} ms, p99 {p99:.2f} ms ({samples} one at a time)")
        zk = KazooClient(hosts=f"{ensemble.connect}{CHROOT}")
        zk.start(timeout=10)
        mb = args.catchup_mb or (64 if args.quick else 512)
        after = dict(kv.split("=", 1) for kv in args.after.split(",") if kv)
        variants = {"before": ({k: "" for k in after}, {PIPELINE_ENV: "0"}),
                    "after": (after, {})}
        rounds = args.rounds if "catchup" in sections else 0
        for i in range(rounds):  # alternate: the machine's load swings
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for name in (args.variant,) if args.variant else order[:args.variants]:
                c = catch_up(fleet, zk, bootstrap, mb, f"catchup-{name}-{i}",
                             variants[name], f"{args.profile.removesuffix('.data')}-{name}-{i}"
                             + (".data" if args.profile.endswith(".data") else "")
                             if args.profile else "", args.catchup_partitions)
                print(f"follower catch-up ({name}, round {i + 1}): {c['rate'] / 1e6:,.0f} "
                      f"MB/s over {c['bytes'] / 1e6:,.0f} MB in {c['partitions']} "
                      f"partition(s); raw sendfile of the same "
                      f"segment files into a file: {c['raw'] / 1e6:,.0f} MB/s (mean of "
                      f"{c['raw_before'] / 1e6:,.0f} before and {c['raw_after'] / 1e6:,.0f} "
                      f"after, each the second pass; ratio {c['rate'] / c['raw']:.2f}; their "
                      f"first passes {c['raw_cold'] / 1e6:,.0f} MB/s); CPU s per 100 MB: follower "
                      f"{c['follower_cpu']:.3f} (user {c['follower_user']:.3f}), leader "
                      f"{c['leader_cpu']:.3f} (user {c['leader_user']:.3f}), raw loop "
                      f"(both ends) {c['raw_cpu']:.3f}, this script's watch "
                      f"{c['watch_cpu']:.3f}", flush=True)
        if "failover" not in sections:
            kills = 0
        runs = [failover_s(fleet, zk, "rf3") for _ in range(kills)]
        zk.stop()
        if not runs:
            return
        times = [took for took, _ in runs]
        after = [took - elected for took, elected in runs]
        print(f"kill -9 of partition 0's leader -> next ack: median "
              f"{statistics.median(times):.1f} s, max {max(times):.1f} s over {kills} "
              f"kill(s); floor: session timeout {SESSION_MS / 1000:.1f} s; from the new "
              f"leader's election to the ack: median {statistics.median(after):.2f} s, "
              f"max {max(after):.2f} s")


if __name__ == "__main__":
    main()
