"""`klog demo-cluster` (what `make run-cluster` runs): what a fleet is for, in one command.

A ZooKeeper server (Debian's package, on 127.0.0.1:2181, data under var/fleet/zk) and three
appliances of two workers each (broker ids 1-3, ports 9192-9197, log dirs under var/fleet),
joined through it, fresh on each run. The show: a topic of six partitions with three replicas
each (`min.insync.replicas=2`) takes ten events with acks=all; appliance 2 is stopped with
SIGTERM (a controlled shutdown: its leaderships move to the other replicas first); acks=all
still succeeds with two replicas in sync and every event is read back; appliance 2 starts
again and rejoins every ISR. Then it keeps serving until Ctrl-C, SIGTERM or SIGHUP (or stops
after the show with --once).

Whatever stops it (a signal, an error), the appliances are stopped first, then ZooKeeper:
their controlled shutdown asks the controller through it. The children run in sessions of
their own, so a terminal's Ctrl-C reaches only this process, which stops them in that order.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

ROOT = Path("var/fleet")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
TOPIC = "fleet-demo"
STOPPED = 2  # the appliance the show stops and starts again
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def add_arguments(parser) -> None:
    parser.add_argument("--once", action="store_true", help="stop after the show")
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument("--port", type=int, default=9192,
                        help="appliance 1's first port; the fleet takes six from there")


class StopRequested(Exception):
    """A signal asked the demo to stop."""


def _stop_requested(signum, frame) -> None:
    raise StopRequested(signal.Signals(signum).name)


class LocalFleet:
    """ZooKeeper and three appliances as child processes of this one, under ``ROOT``."""

    def __init__(self, zookeeper_port: int, first_port: int) -> None:
        self.zookeeper_port = zookeeper_port
        self.first_port = first_port
        self.zookeeper: subprocess.Popen | None = None
        self.appliances: dict[int, subprocess.Popen] = {}

    def port(self, broker_id: int, worker: int = 0) -> int:
        return self.first_port + 2 * (broker_id - 1) + worker

    def bootstrap(self, broker_id: int) -> str:
        return f"127.0.0.1:{self.port(broker_id)}"

    def config(self, broker_id: int) -> Path:
        return ROOT / f"appliance{broker_id}.properties"

    def start_zookeeper(self) -> None:
        data = ROOT / "zk"
        data.mkdir(parents=True, exist_ok=True)
        config = ROOT / "zoo.cfg"
        config.write_text(f"tickTime=500\ndataDir={data.resolve()}\n"
                          f"clientPort={self.zookeeper_port}\nclientPortAddress=127.0.0.1\n"
                          f"admin.enableServer=false\nmaxSessionTimeout=60000\n")
        log = open(ROOT / "zookeeper.log", "ab")  # noqa: SIM115 (held by the server)
        self.zookeeper = subprocess.Popen(
            ["java", "-Xmx128m", "-cp", f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(config.resolve())],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_appliance(self, broker_id: int) -> None:
        config = self.config(broker_id)
        if not config.exists():
            disks = ",".join(str((ROOT / f"appliance{broker_id}" / f"disk{i}").resolve())
                             for i in range(2))
            config.write_text(
                f"broker.id={broker_id}\nlisteners=PLAINTEXT://127.0.0.1:{self.port(broker_id)}\n"
                f"log.dirs={disks}\nnum.partitions=6\nlog.segment.bytes={16 << 20}\n"
                f"zookeeper.connect=127.0.0.1:{self.zookeeper_port}/klog-demo\n"
                f"zookeeper.session.timeout.ms=6000\nbroker.rack=rack-{broker_id}\n"
                f"controlled.shutdown.retry.backoff.ms=1000\n")
        log = open(ROOT / f"appliance{broker_id}.log", "ab")  # noqa: SIM115
        self.appliances[broker_id] = subprocess.Popen(
            [sys.executable, "-m", "klog_cli.main", "appliance", "run", "--config",
             str(config.resolve())], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop_appliance(self, broker_id: int) -> float:
        """SIGTERM, as systemd stops it; returns how long its controlled shutdown took."""
        started = time.monotonic()
        _stop([self.appliances.pop(broker_id)])
        return time.monotonic() - started

    def stop(self) -> None:
        """The appliances first, then ZooKeeper (their controlled shutdown needs it)."""
        _stop(list(self.appliances.values()))
        self.appliances.clear()
        if self.zookeeper is not None:
            _stop([self.zookeeper])
            self.zookeeper = None


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the appliance's workers with it
            process.wait()


def _klog(*args: str, stdin: str | None = None, check: bool = True,
          console: Console | None = None) -> str:
    """Run the `klog` command as a user would; echoed (``$ klog ...``) when ``console``."""
    if console is not None:
        console.print(escape("$ klog " + shlex.join(args)), style="bold cyan")
    done = subprocess.run([sys.executable, "-m", "klog_cli.main", *args], input=stdin,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "110"})
    if check and done.returncode != 0:
        raise SystemExit(f"klog {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _fleet_status(fleet: LocalFleet) -> dict:
    return orjson.loads(_klog("cluster", "status", "--config", str(fleet.config(1)), "--json"))


def _wait(what: str, ready, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (SystemExit, subprocess.SubprocessError, orjson.JSONDecodeError):
            pass  # not up yet
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}; see the logs in {ROOT}")


def _serving_nodes(fleet: LocalFleet) -> int:
    return sum(len(a["nodes"]) for a in _fleet_status(fleet)["appliances"].values())


def _in_sync(fleet: LocalFleet) -> bool:
    status = _fleet_status(fleet)
    return (not status["under_replicated_partitions"]
            and any(p["topic"] == TOPIC for p in status["partition_states"]))


def _leaders(status: dict) -> dict[int, dict]:
    return {p["partition"]: p for p in status["partition_states"] if p["topic"] == TOPIC}


def _consume_all(fleet: LocalFleet, console: Console, through: int) -> list[str]:
    lines = _klog("consume", "-b", fleet.bootstrap(through), "-t", TOPIC, "--from-beginning",
                  "--exit", "--format", "%p %o %k %s\\n", console=console).splitlines()
    console.print(f"read {len(lines)} events through appliance {through}")
    return lines


def _show(fleet: LocalFleet, console: Console) -> None:
    console.rule("[bold]a fleet of three appliances (two workers each) and ZooKeeper")
    _wait("six nodes in the fleet", lambda: _serving_nodes(fleet) >= 6)
    b1 = fleet.bootstrap(1)
    console.print(_klog("topics", "-b", b1, "create", TOPIC, "--partitions", "6",
                        "--replication-factor", "3", "--config", "min.insync.replicas=2",
                        console=console).rstrip())
    _wait("every replica in sync", lambda: _in_sync(fleet))
    events = "".join(f"user{i % 3}:{{\"event\": \"click\", \"n\": {i}}}\n" for i in range(10))
    _klog("produce", "-b", b1, "-t", TOPIC, "--key-separator", ":", "--acks", "all",
          stdin=events, console=console)
    console.print("[green]10 events written with acks=all: each is on the three replicas")
    console.print(_klog("cluster", "status", "--config", str(fleet.config(1)),
                        console=console).rstrip())
    before = _leaders(_fleet_status(fleet))

    console.rule(f"[bold]appliance {STOPPED} stops (SIGTERM: a controlled shutdown)")
    took = fleet.stop_appliance(STOPPED)
    console.print(f"appliance {STOPPED} stopped in {took:.1f} s, once its leaderships had moved")
    more = "".join(f"user{i % 3}:{{\"event\": \"click\", \"n\": {i}}}\n" for i in range(10, 15))
    _klog("produce", "-b", b1, "-t", TOPIC, "--key-separator", ":", "--acks", "all",
          stdin=more, console=console)
    console.print("[green]5 more events with acks=all: two replicas in sync meet "
                  "min.insync.replicas=2")
    read = _consume_all(fleet, console, through=3)
    console.print("[green]every event is there" if len(read) == 15
                  else f"[red]expected 15 events, read {len(read)}")
    after = _leaders(_fleet_status(fleet))
    table = Table("partition", "replicas", "leader before", "leader now", "isr now",
                  title=f"where leadership went (appliance {STOPPED}'s nodes: "
                        f"{STOPPED}00, {STOPPED}01)")
    for partition, state in sorted(after.items()):
        moved = before[partition]["leader"] != state["leader"]
        table.add_row(str(partition), ",".join(map(str, state["replicas"])),
                      str(before[partition]["leader"]), str(state["leader"]),
                      ",".join(map(str, state["isr"])), style="yellow" if moved else None)
    console.print(table)

    console.rule(f"[bold]appliance {STOPPED} starts again and catches up")
    fleet.start_appliance(STOPPED)
    started = time.monotonic()
    _wait(f"appliance {STOPPED} back in every ISR", lambda: _in_sync(fleet))
    console.print(f"[green]back in every ISR after {time.monotonic() - started:.1f} s "
                  f"(leadership returns to the preferred replicas within "
                  f"leader.imbalance.check.interval.seconds, 300)")
    console.print(_klog("cluster", "status", "--config", str(fleet.config(1)),
                        console=console).rstrip())


def run(args) -> int:
    console = Console()
    if shutil.which("java") is None or not ZOOKEEPER_JAR.exists():
        console.print("Java or ZooKeeper is not installed; `make run-cluster` installs them")
        return 1
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_requested)
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    fleet = LocalFleet(args.zookeeper_port, args.port)
    try:
        fleet.start_zookeeper()
        for broker_id in (1, 2, 3):
            fleet.start_appliance(broker_id)
        _show(fleet, console)
        if args.once:
            return 0
        console.print(f"[bold]serving on {fleet.bootstrap(1)} (and the next five ports); "
                      f"Ctrl-C stops")
        while True:
            for broker_id, process in fleet.appliances.items():
                if process.poll() is not None:
                    console.print(f"[red]appliance {broker_id} exited ({process.returncode})")
                    return 1
            time.sleep(1)
    except StopRequested as stop:
        console.print(f"{stop}: stopping the appliances, then ZooKeeper")
        return 0
    finally:
        for signum in STOP_SIGNALS:  # a second signal must not cut the stop short
            signal.signal(signum, signal.SIG_IGN)
        fleet.stop()
