"""The fault tests' fleet: three appliances and a three-server ZooKeeper ensemble, each in a
network namespace of its own on one bridge (network.py), and the faults a test injects.

Appliance `b` (broker.id b) lives in namespace kflt-a<b> at 10.78.0.1<b>, listening on and
advertising that address (worker i on port 9092 + i); ZooKeeper server `z` in kflt-z<z> at
10.78.0.2<z>:2181. The ZooKeeper servers have namespaces of their own rather than one shared
"ZooKeeper host": a partition is then a rule about addresses in one namespace, whether it
cuts an appliance from every server or from some, and a server can be cut from its quorum
the same way, as on real hosts.

A fourth appliance's namespace (kflt-a4, 10.78.0.14) is made with the others but not started:
`start_appliance(SPARE)` brings it into the fleet, for tests that add an appliance
(reassignment); `restore` leaves it as it is.

Faults: `kill` (kill -9 of the supervisor and every worker), `terminate` (SIGTERM: the
appliance's own graceful or controlled shutdown), `pause`/`resume` (SIGSTOP/SIGCONT of every
process of the appliance), `cut`/`heal` (iptables in the appliance's namespace: from
ZooKeeper, from its peers, or both). `restore` undoes whatever a test left, so each test
starts on a whole fleet even after another failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
from confluent_kafka.admin import AdminClient

from appliance.workers.groups.offsets_log import partition_for
from tests.conftest import REPO, Appliance
from tests.faults.network import Network
from tests.fleet.zookeeper import Ensemble
from tests.polling import wait_until

SESSION_MS = 6000  # zookeeper.session.timeout.ms of every appliance
LAG_MS = 3000  # replica.lag.time.max.ms: a cut follower leaves the ISR soon (as tests/fleet)
PORT = 9092
LOG_DIRS = 2  # workers (Kafka nodes) per appliance
CORE = (1, 2, 3)  # the appliances every test starts with
SPARE = 4  # an appliance whose host exists but which starts only when a test says so
ZOOKEEPERS = (1, 2, 3)
CHROOT = "/klog-faults"
NODES_PER_APPLIANCE = 100
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 16  # offsets.topic.num.partitions (the default)
# Active segments and their indexes are preallocated (posix_fallocate): at the test
# defaults (64 MiB + 2 x 10 MiB) the suite's eight topics and the offsets topic, three
# replicas each, took ~14 GiB and filled the disk this machine shares (ENOSPC). A run
# writes a few MB per topic; these sizes take ~1 GiB in all.
SMALL_SEGMENTS = {"log.segment.bytes": str(4 << 20), "log.index.size.max.bytes": str(1 << 20),
                  "offsets.topic.segment.bytes": str(1 << 20)}
# Leadership goes back to the preferred replicas (the first of each assignment) a few
# seconds after an appliance returns, for every partition led elsewhere (Kafka's defaults,
# 300 s and 10 % per node, would do it at a moment no test chooses, or never for the last
# few partitions of a node): each test starts with the leaders where the assignment puts
# them, and every return of an appliance moves leaders back under the workload. Every
# `wait_whole` waits for that check (about 15 times in the module): 2 s, not 5.
PREFERRED_LEADERS = {"auto.leader.rebalance.enable": "true",
                     "leader.imbalance.check.interval.seconds": "2",
                     "leader.imbalance.per.broker.percentage": "0"}
# tracebacks that are CPython's, not ours: (words that all appear in one)
CPYTHON_QUIRKS = [
    # 3.11's selector transport fails the future a sendfile waits on twice when the socket
    # breaks while the write buffer drains (write error, then connection lost): the loop
    # logs InvalidStateError after the connection is closed (python/cpython#157025)
    ("_call_connection_lost", "_empty_waiter.set_exception", "InvalidStateError"),
]


class FaultFleet:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.network = Network()
        self.ensemble: Ensemble | None = None
        self.appliances: dict[int, Appliance] = {}
        self.paused: set[int] = set()
        self._zk = None

    # life cycle ----------------------------------------------------------------------------

    def start(self) -> FaultFleet:
        self.network.start()
        zk_hosts = [self.network.add_host(f"z{z}", 20 + z) for z in ZOOKEEPERS]
        for broker_id in (*CORE, SPARE):
            self.network.add_host(f"a{broker_id}", 10 + broker_id)
        self.ensemble = Ensemble(self.workdir / "zk", hosts=[h.address for h in zk_hosts],
                                 command_prefix=lambda i: list(zk_hosts[i].command_prefix))
        self.ensemble.start()
        for broker_id in CORE:
            self.start_appliance(broker_id)
        self.wait_registered(CORE)
        return self

    def close(self) -> None:
        try:
            for broker_id in list(self.paused):
                self.resume(broker_id)
            for appliance in self.appliances.values():
                appliance.stop()
            if self._zk is not None:
                self._zk.stop()
            if self.ensemble is not None:
                self.ensemble.close()
        finally:
            self.network.close()

    def appliance(self, broker_id: int) -> Appliance:
        """The appliance `broker_id` (made, not started, on first use)."""
        if broker_id not in self.appliances:
            host = self.network.hosts[f"a{broker_id}"]
            self.appliances[broker_id] = Appliance(
                self.workdir / f"a{broker_id}", log_dirs=LOG_DIRS, host=host.address,
                port=PORT, command_prefix=host.command_prefix, settings={
                    "broker.id": str(broker_id),
                    "zookeeper.connect": f"{self.ensemble.connect}{CHROOT}",
                    "zookeeper.session.timeout.ms": str(SESSION_MS),
                    "broker.rack": f"rack-{broker_id}",
                    "replica.lag.time.max.ms": str(LAG_MS),
                    "default.replication.factor": "3",
                    "min.insync.replicas": "2",
                    "group.initial.rebalance.delay.ms": "0",
                    "file.delete.delay.ms": "1000",  # a removed replica's log goes soon
                    **SMALL_SEGMENTS, **PREFERRED_LEADERS,
                })
        return self.appliances[broker_id]

    def start_appliance(self, broker_id: int) -> Appliance:
        return self.appliance(broker_id).start(timeout_s=90)

    def running(self) -> list[int]:
        return sorted(b for b, a in self.appliances.items()
                      if a.process is not None and a.process.poll() is None)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.appliances[b].bootstrap for b in self.running())

    def address(self, broker_id: int) -> str:
        return self.network.hosts[f"a{broker_id}"].address

    # ZooKeeper, as the test sees it --------------------------------------------------------

    @property
    def zk(self):
        """A kazoo client of the test's own on the fleet's chroot (from the root namespace)."""
        if self._zk is None:
            from kazoo.client import KazooClient
            self._zk = KazooClient(hosts=f"{self.ensemble.connect}{CHROOT}")
            self._zk.start(timeout=30)
        return self._zk

    def registered(self) -> set[int]:
        """Node ids in /brokers/ids."""
        return {int(n) for n in self.zk.get_children("/brokers/ids")}

    def appliances_registered(self) -> set[int]:
        return {n // NODES_PER_APPLIANCE for n in self.registered()}

    def wait_registered(self, broker_ids, timeout_s: float = 60) -> None:
        nodes = {b * NODES_PER_APPLIANCE + i for b in broker_ids for i in range(LOG_DIRS)}
        wait_until(lambda: nodes <= self.registered(), timeout_s,
                   f"nodes {sorted(nodes)} to register")
        wait_until(lambda: len(AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(
            timeout=10).brokers) >= len(nodes), timeout_s, "Metadata to list every node")

    def state(self, topic: str, partition: int) -> dict:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return orjson.loads(data)

    def leader_appliance(self, topic: str, partition: int) -> int:
        return self.state(topic, partition)["leader"] // NODES_PER_APPLIANCE

    def controller(self) -> int:
        """The controlling appliance's broker.id, -1 while none is elected."""
        try:
            data, _ = self.zk.get("/controller")
        except Exception:  # noqa: BLE001 - NoNode: none elected right now
            return -1
        return orjson.loads(data)["brokerid"]

    def replicated_topics(self) -> dict[str, int]:
        """Topic -> partition count, for topics of replication factor > 1."""
        found = {}
        for topic in self.zk.get_children("/brokers/topics"):
            assignment = orjson.loads(self.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
            if any(len(r) > 1 for r in assignment.values()):
                found[topic] = len(assignment)
        return found

    def assignment(self, topic: str) -> dict[int, list[int]]:
        """Partition -> its replicas (node ids), the preferred leader first."""
        raw = orjson.loads(self.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
        return {int(p): replicas for p, replicas in raw.items()}

    def under_replicated(self) -> list[tuple[str, int]]:
        """Partitions of replicated topics whose ISR lacks a replica, or without a leader."""
        out = []
        for topic in self.replicated_topics():
            for partition, replicas in sorted(self.assignment(topic).items()):
                state = self.state(topic, partition)
                if state["leader"] < 0 or set(state["isr"]) != set(replicas):
                    out.append((topic, partition))
        return out

    def unbalanced(self) -> list[tuple[str, int]]:
        """Partitions of replicated topics not led by their preferred replica."""
        return [(topic, partition) for topic in self.replicated_topics()
                for partition, replicas in sorted(self.assignment(topic).items())
                if self.state(topic, partition)["leader"] != replicas[0]]

    def wait_whole(self, timeout_s: float = 120) -> None:
        """Every running appliance registered, every ISR whole, and every partition led by
        its preferred replica again (the controller's rebalance, PREFERRED_LEADERS)."""
        self.wait_registered(self.running(), timeout_s)
        wait_until(lambda: not self.under_replicated(), timeout_s,
                   "every ISR to be whole again")
        wait_until(lambda: not self.unbalanced(), timeout_s,
                   "every partition to be led by its preferred replica again")

    def coordinator(self, group: str) -> int:
        """The appliance coordinating `group`: the one leading its partition of the offsets
        topic."""
        return self.leader_appliance(OFFSETS_TOPIC, partition_for(group, OFFSETS_PARTITIONS))

    def log_marks(self) -> dict[int, int]:
        """Where each appliance's log ends now (for `tracebacks_since`)."""
        return {b: a.stderr_path.stat().st_size if a.stderr_path.exists() else 0
                for b, a in self.appliances.items()}

    def tracebacks_since(self, marks: dict[int, int]) -> list[str]:
        """Every traceback the appliances logged since `marks`: an exception nobody handled
        is a bug, even when the clients never noticed."""
        found = []
        for broker_id, appliance in self.appliances.items():
            if not appliance.stderr_path.exists():
                continue
            with open(appliance.stderr_path, "rb") as f:
                f.seek(marks.get(broker_id, 0))
                text = f.read().decode(errors="replace")
            for block in text.split("Traceback (most recent call last):")[1:]:
                # the exception: the first line neither indented (frames) nor a log record
                lines = [line for line in block.splitlines()
                         if line and not line[0].isspace() and not line[0].isdigit()]
                exception = lines[0] if lines else block[:200]
                if not any(all(k in block for k in known) for known in CPYTHON_QUIRKS):
                    found.append(f"a{broker_id}: {exception}")
        return found

    def reassign(self, *args: str) -> subprocess.CompletedProcess:
        """`klog cluster reassign ARGS` as an operator runs it (from the root namespace, with
        appliance 1's config: its zookeeper.connect)."""
        return subprocess.run(
            [sys.executable, "-m", "klog_cli.main", "cluster", "reassign", "--config",
             str(self.appliance(1).config), *args], cwd=REPO, capture_output=True, text=True,
            timeout=60)

    def set_aside(self, topic: str) -> list[Path]:
        """Logs of `topic` renamed aside for deletion (`<topic>-<p>.<id>-delete`) and not
        removed yet."""
        return [path for appliance in self.appliances.values() for disk in appliance.log_dirs
                for path in disk.glob(f"{topic}-*-delete")]

    # faults --------------------------------------------------------------------------------

    def pids(self, broker_id: int) -> list[int]:
        """The supervisor's pid, then its workers' (from the shm region)."""
        appliance = self.appliances[broker_id]
        workers = [p for p in appliance.pids().values() if p > 0]
        return [appliance.process.pid, *workers]

    def kill(self, broker_id: int) -> None:
        """kill -9 of the supervisor, then of its workers: nothing of the appliance is left."""
        pids = self.pids(broker_id)
        self.appliances[broker_id].kill()
        for pid in pids[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.paused.discard(broker_id)

    def terminate(self, broker_id: int, timeout_s: float = 60) -> int | None:
        """SIGTERM: the appliance stops as it does under systemd; its exit code."""
        return self.appliances[broker_id].stop(signal.SIGTERM, timeout_s)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP every process of the appliance (a stalled host: its session expires)."""
        for pid in self.pids(broker_id):
            os.kill(pid, signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume_workers(self, broker_id: int) -> None:
        """SIGCONT of the workers only: until the supervisor runs again they serve as they
        were last told, leaders included (zombies: the fleet has moved on meanwhile)."""
        for pid in self.pids(broker_id)[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def resume(self, broker_id: int) -> None:
        """SIGCONT of every process of the appliance, the workers first."""
        self.resume_workers(broker_id)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pids(broker_id)[0], signal.SIGCONT)
        self.paused.discard(broker_id)

    def cut(self, broker_id: int, *, zookeeper: bool = False, peers: bool = False) -> None:
        """Partition appliance `broker_id` from the ZooKeeper servers and/or from the other
        appliances (started or not); the test's own control address stays reachable."""
        addresses = []
        if zookeeper:
            addresses += [self.network.hosts[f"z{z}"].address for z in ZOOKEEPERS]
        if peers:
            addresses += [self.address(b) for b in (*CORE, SPARE) if b != broker_id]
        self.network.cut(f"a{broker_id}", addresses)

    def heal(self, broker_id: int) -> None:
        self.network.heal(f"a{broker_id}")

    def restore(self) -> None:
        """Whatever a test left: heal every cut, resume every paused appliance, start every
        core appliance that is not running; then wait until the fleet is whole."""
        for broker_id in (*CORE, SPARE):
            self.heal(broker_id)
        for broker_id in list(self.paused):
            self.resume(broker_id)
        for broker_id in CORE:
            if broker_id not in self.running():
                self.start_appliance(broker_id)
        self.wait_whole()
