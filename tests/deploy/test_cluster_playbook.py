"""`ansible-playbook playbooks/cluster.yml` on three booted Debian hosts (systemd as PID 1).

The hosts boot once for tests/deploy (conftest.py); this module wipes them, the playbook
deploys ZooKeeper and an appliance on each (in plaintext), and the tests then use the fleet
from outside the hosts with real Kafka clients, kill an appliance under systemd, and roll a
new klog wheel through the fleet. The second run and --check are the secured fleet's
(test_secured_playbook.py, which deploys before this module): the same tasks and more.
Topics have three replicas (one per appliance) and min.insync.replicas=2, so the kill and the
roll are survived by failover: the playbook restarts a host only once no partition of the fleet
is under-replicated, and producers (idempotent, acks=all) retry through the leader moves.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import REPO
from tests.deploy.playbook import FIGURES, inventory, run_playbook, wipe

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def deployed(booted):
    """The booted hosts (shared by tests/deploy's modules), wiped, then deployed in plaintext."""
    wipe(booted.fleet)
    path = inventory(booted.fleet, booted.workdir / "inventory.yml")
    first = run_playbook(path, booted.log, *booted.wheels)
    FIGURES["fresh deploy of three hosts (s)"] = first.seconds
    return Deployed(booted.fleet, path, booted.log, booted.wheels, first)


class Deployed:
    def __init__(self, fleet, inventory_path, log, wheels, first_run):
        self.fleet = fleet
        self.inventory = inventory_path
        self.log = log
        self.wheels = wheels
        self.first_run = first_run

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{h.address}:9092" for h in self.fleet.hosts)

    @property
    def zookeeper(self) -> str:
        return ",".join(f"{h.address}:2181" for h in self.fleet.hosts) + "/klog"

    def ssh(self, host, command: str) -> str:
        return host.ssh(self.fleet.key, command).stdout.strip()

    def unit(self, host, *properties: str, unit: str = "klog-appliance") -> dict[str, str]:
        out = self.ssh(host, f"systemctl show {unit} " +
                       " ".join(f"-p {p}" for p in properties))
        return dict(line.split("=", 1) for line in out.splitlines())

    def cluster_status(self) -> dict:
        done = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status",
                               "--zookeeper", self.zookeeper, "--json"],
                              cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
        return json.loads(done.stdout)


def zookeeper_mode(deployed: Deployed, host) -> str:
    """The server's own answer to srvr, asked on the host."""
    return deployed.ssh(host, "python3 -c \"import socket; s=socket.create_connection("
                        f"('{host.address}', 2181)); s.sendall(b'srvr'); "
                        "print(s.makefile().read())\" | sed -n 's/^Mode: //p'")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})]
                        )[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics[name]
        if len(topic.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in topic.partitions.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} never had a leader for each of its {partitions} partitions")


def produce(bootstrap: str, topic: str, values: range) -> set[int]:
    """The values acknowledged with acks=all (idempotent producer)."""
    acked: set[int] = set()
    errors: list = []

    def delivered(error, message):
        (errors.append(error) if error else acked.add(int(message.value())))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for value in values:
        producer.produce(topic, str(value).encode(), key=str(value % 97).encode(),
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(120) == 0
    assert not errors, errors[:5]
    return acked


def read_group(bootstrap: str, topic: str, group: str, expected: set[int],
               timeout_s: float = 120) -> set[int]:
    """What a consumer group reads of `topic`, until it has `expected` or the time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    consumer.subscribe([topic])
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while not expected <= seen and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if not message.error():
                    seen.add(int(message.value()))
    finally:
        consumer.close()
    return seen


def test_the_playbook_deploys_zookeeper_and_an_appliance_on_each_host(deployed):
    assert set(deployed.first_run.changed) >= {"h1", "h2", "h3", "localhost"}
    modes = []
    for host in deployed.fleet.hosts:
        assert deployed.ssh(host, "systemctl is-enabled klog-appliance zookeeper") == \
            "enabled\nenabled"
        assert deployed.ssh(host, "systemctl is-active klog-appliance zookeeper") == \
            "active\nactive"
        modes.append(zookeeper_mode(deployed, host))
        # the appliance runs as the system user klog, from the venv the wheels filled
        assert deployed.ssh(host, "ps -o user= -p $(systemctl show -p MainPID --value "
                            "klog-appliance)") == "klog"
    assert sorted(modes) == ["follower", "follower", "leader"]
    status = deployed.cluster_status()
    assert {k: len(v["nodes"]) for k, v in status["appliances"].items()} == \
        {"1": 2, "2": 1, "3": 1}
    assert {v["rack"] for v in status["appliances"].values()} == {"rack-0", "rack-1"}
    assert status["controller"] in (1, 2, 3)


def test_kafka_clients_use_the_fleet_from_outside_the_hosts(deployed):
    # through one appliance only: it knows the whole fleet
    create_topic(f"{deployed.fleet.hosts[2].address}:9092", "deployed", 8)
    acked = produce(deployed.bootstrap, "deployed", range(4000))
    assert len(acked) == 4000
    assert read_group(deployed.bootstrap, "deployed", "deploy-readers", acked) == acked
    leaders = AdminClient({"bootstrap.servers": deployed.bootstrap}).list_topics(
        "deployed", timeout=10).topics["deployed"].partitions
    assert {p.leader // 100 for p in leaders.values()} == {1, 2, 3}, "spread over the fleet"


def test_systemd_restarts_a_killed_appliance_and_nothing_acknowledged_is_lost(deployed):
    create_topic(deployed.bootstrap, "killed", 6)
    acked = produce(deployed.bootstrap, "killed", range(3000))
    victim = deployed.fleet.hosts[1]
    before = deployed.unit(victim, "MainPID", "NRestarts")
    # systemd sends SIGKILL to every process of the unit; it may answer 1 when one of them
    # was already gone (the workers die with their supervisor): the restart below is the proof
    killed = victim.ssh(deployed.fleet.key, "systemctl kill --signal=KILL klog-appliance",
                        check=False)
    print(f"systemctl kill: rc={killed.returncode} {killed.stderr.strip()}", file=sys.stderr)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = deployed.unit(victim, "MainPID", "NRestarts", "ActiveState", "SubState")
        if (now["MainPID"] not in ("0", before["MainPID"]) and now["ActiveState"] == "active"
                and now["SubState"] == "running"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"systemd did not bring klog-appliance back: {now}")
    assert int(now["NRestarts"]) == int(before["NRestarts"]) + 1
    # Type=notify: active means every worker serves again; the killed data is all there
    acked |= produce(deployed.bootstrap, "killed", range(3000, 4000))
    assert read_group(deployed.bootstrap, "killed", "after-kill", acked) == acked


class SteadyProducer(threading.Thread):
    """Sends a numbered stream until stopped; remembers what was acknowledged with acks=all."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.acked: set[int] = set()
        self.errors: list = []
        self.stopping = threading.Event()
        # one replica per partition: a partition is away while its appliance restarts, so the
        # producer retries (idempotence keeps order and drops duplicates) for up to 5 minutes
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "delivery.timeout.ms": 300_000,
                                  "message.timeout.ms": 300_000})
        self.topic = topic
        self.sent = 0
        self.last_acked = -1

    def _delivered(self, error, message):
        if error:
            self.errors.append(error)
        else:
            self.acked.add(int(message.value()))
            self.last_acked = max(self.last_acked, int(message.value()))

    def wait_acked_beyond(self, value: int, timeout_s: float = 120) -> None:
        """Until a value sent after `value` is acknowledged: the stream flows."""
        deadline = time.monotonic() + timeout_s
        while self.last_acked <= value:
            assert time.monotonic() < deadline, f"nothing sent after {value} was acknowledged"
            assert not self.errors, self.errors[:5]
            time.sleep(0.1)

    def run(self):
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, str(self.sent).encode(),
                                      key=str(self.sent % 89).encode(),
                                      on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.producer.flush(300)


def test_a_new_wheel_rolls_through_the_fleet_host_by_host_without_loss(deployed, tmp_path):
    version = f"0.1.0+deploytest.{int(time.time())}"
    source = tmp_path / "klog-src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", ".hypothesis", ".ci", "build", "var", "*.egg-info", "__pycache__",
        ".*_cache", "*.so", "perf"))
    pyproject = source / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^version = ".*"$', f'version = "{version}"',
                                pyproject.read_text()))
    create_topic(deployed.bootstrap, "rolling", 6)
    starts_before = {h.name: deployed.unit(h, "ExecMainStartTimestampMonotonic")
                     for h in deployed.fleet.hosts}
    zookeeper_before = {h.name: deployed.unit(h, "ExecMainStartTimestampMonotonic",
                                              unit="zookeeper") for h in deployed.fleet.hosts}
    producer = SteadyProducer(deployed.bootstrap, "rolling")
    producer.start()
    try:
        # the roll starts on a stream that flows, and the stream flows on after it
        producer.wait_acked_beyond(-1)
        # a zoo.cfg change in the same run: the ensemble restarts one server at a time too
        rolled = run_playbook(deployed.inventory, deployed.log, *deployed.wheels,
                              "-e", f"klog_wheels_source={source}",
                              "-e", '{"zookeeper_extra_config": {"autopurge.purgeInterval": 1}}')
        FIGURES["rolling upgrade of three hosts (s)"] = rolled.seconds
        producer.wait_acked_beyond(producer.sent)
    finally:
        producer.stopping.set()
        producer.join(360)
    assert not producer.errors, producer.errors[:5]
    assert producer.acked, "nothing was acknowledged"
    for host in deployed.fleet.hosts:
        installed = deployed.ssh(host, "/opt/klog/venv/bin/python -c \"import importlib."
                                 "metadata as m; print(m.version('klog'))\"")
        assert installed == version, host.name
    # each appliance restarted once, in inventory order (serial: 1): a host starts only after
    # the one before it served again (its start returned, Type=notify, and it re-registered)
    windows = []
    for host in deployed.fleet.hosts:
        unit = deployed.unit(host, "ExecMainStartTimestampMonotonic",
                             "ActiveEnterTimestampMonotonic")
        assert unit["ExecMainStartTimestampMonotonic"] != \
            starts_before[host.name]["ExecMainStartTimestampMonotonic"], host.name
        windows.append((int(unit["ExecMainStartTimestampMonotonic"]),
                        int(unit["ActiveEnterTimestampMonotonic"])))
    for (_, ready), (start, _) in zip(windows, windows[1:]):
        assert ready < start, f"a host restarted before the previous one served: {windows}"
    zookeeper_starts = []
    for host in deployed.fleet.hosts:
        start = deployed.unit(host, "ExecMainStartTimestampMonotonic", unit="zookeeper")
        assert start != zookeeper_before[host.name], f"zookeeper on {host.name} kept running"
        assert "autopurge.purgeInterval=1" in deployed.ssh(host, "cat /etc/zookeeper/conf/zoo.cfg")
        zookeeper_starts.append(int(start["ExecMainStartTimestampMonotonic"]))
    # the next server restarts only after the one before answered srvr as leader or follower
    assert zookeeper_starts == sorted(zookeeper_starts)
    assert sorted(zookeeper_mode(deployed, h) for h in deployed.fleet.hosts) == \
        ["follower", "follower", "leader"]
    consumed = read_group(deployed.bootstrap, "rolling", "after-roll", producer.acked)
    assert producer.acked <= consumed, f"lost {len(producer.acked - consumed)} acknowledged"
