"""`klog demo-cluster` (what `make run-cluster` runs): a local fleet in one command.

A ZooKeeper server (Debian's package, on 127.0.0.1:2181, data under var/fleet/zk) and three
appliances of two workers each (broker ids 1-3, ports 9192-9197, log dirs under var/fleet),
joined through it; then kcat shows every node's view, a 6-partition topic spread over the
fleet takes ten events, they are read back, and `klog cluster status` shows the fleet. Keeps
serving until Ctrl-C (or stops after the show with --once).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

ROOT = Path("var/fleet")
ZK_PORT = 2181
FIRST_PORT = 9192
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


def add_arguments(parser) -> None:
    parser.add_argument("--once", action="store_true", help="stop after showing the fleet")


def _zookeeper() -> subprocess.Popen:
    data = ROOT / "zk"
    data.mkdir(parents=True, exist_ok=True)
    config = ROOT / "zoo.cfg"
    config.write_text(f"tickTime=500\ndataDir={data.resolve()}\nclientPort={ZK_PORT}\n"
                      f"clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
                      f"maxSessionTimeout=60000\n")
    log = open(ROOT / "zookeeper.log", "ab")  # noqa: SIM115 (held by the server)
    return subprocess.Popen(["java", "-Xmx128m", "-cp", f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
                             "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
                            stdout=log, stderr=subprocess.STDOUT)


def _appliance(broker_id: int) -> tuple[subprocess.Popen, Path]:
    port = FIRST_PORT + 2 * (broker_id - 1)
    disks = ",".join(str((ROOT / f"appliance{broker_id}" / f"disk{i}").resolve())
                     for i in range(2))
    config = ROOT / f"appliance{broker_id}.properties"
    config.write_text(f"broker.id={broker_id}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                      f"log.dirs={disks}\nnum.partitions=6\n"
                      f"zookeeper.connect=127.0.0.1:{ZK_PORT}/klog-demo\n"
                      f"zookeeper.session.timeout.ms=6000\nbroker.rack=rack-{broker_id}\n")
    log = open(ROOT / f"appliance{broker_id}.log", "ab")  # noqa: SIM115
    process = subprocess.Popen([sys.executable, "-m", "klog_cli.main", "appliance", "run",
                                "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    return process, config


def _kcat(bootstrap: str, *args, stdin=None) -> str:
    return subprocess.run(["kcat", "-b", bootstrap, *args], input=stdin, text=True,
                          capture_output=True, check=True, timeout=30).stdout


def _wait_for_fleet(bootstrap: str, nodes: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if _kcat(bootstrap, "-L").count(" at 127.0.0.1:") >= nodes:
                return
        except subprocess.SubprocessError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the fleet did not show {nodes} nodes; see the logs in {ROOT}")


def run(args) -> int:
    console = Console()
    for tool in ("java", "kcat"):
        if shutil.which(tool) is None:
            console.print(f"{tool} is not installed; `make run-cluster` installs it")
            return 1
    ROOT.mkdir(parents=True, exist_ok=True)
    processes = [_zookeeper()]
    try:
        time.sleep(2)
        configs = []
        for broker_id in (1, 2, 3):
            process, config = _appliance(broker_id)
            processes.append(process)
            configs.append(config)
        bootstrap = f"127.0.0.1:{FIRST_PORT}"
        _wait_for_fleet(bootstrap, 6)
        console.rule("[bold]a fleet of three appliances (two workers each) and ZooKeeper")
        listing = _kcat(f"127.0.0.1:{FIRST_PORT + 5}", "-L").splitlines()
        console.print("\n".join(line for line in listing if "topics:" not in line
                                 and not line.startswith("  topic ")
                                 and not line.strip().startswith("partition ")))
        events = "".join(f"user{i % 3}:{{\"event\": \"click\", \"n\": {i}}}\n" for i in range(10))
        _kcat(bootstrap, "-P", "-t", "fleet-demo", "-K", ":", stdin=events)
        console.print("[green]published 10 events to 'fleet-demo' through appliance 1")
        console.print(_kcat(f"127.0.0.1:{FIRST_PORT + 4}", "-C", "-t", "fleet-demo", "-o",
                            "beginning", "-e", "-q", "-f",
                            "partition %p offset %o key %k value %s\n").rstrip())
        status = subprocess.run([sys.executable, "-m", "klog_cli.main", "cluster", "status",
                                 "--config", str(configs[0])], capture_output=True, text=True)
        print(status.stdout.rstrip() or status.stderr.rstrip(), flush=True)
        if args.once:
            return 0
        console.print(f"[bold]serving on {bootstrap} (and 9193-9197); Ctrl-C stops")
        processes[1].wait()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        # the appliances before ZooKeeper: their controlled shutdown asks the controller
        # through it (without it, each waits out its retries, warning, before stopping)
        _stop(processes[1:])
        _stop(processes[:1])


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
