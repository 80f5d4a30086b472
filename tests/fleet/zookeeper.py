"""A real ZooKeeper ensemble for the cluster tests: Debian's `zookeeper` package, three
QuorumPeerMain JVMs, each stoppable on its own (quorum loss), all killed when the ensemble
closes, even after a failed test.

By default the servers share 127.0.0.1 with ports of their own. Given `hosts` (one address
per server, each in a network namespace of its own: tests/faults), every server uses Kafka's
usual ports on its own address, started through `command_prefix(index)`."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import free_ports

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
CONF_DIR = "/etc/zookeeper/conf"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def unavailable_reason() -> str | None:
    """Why no ensemble can run here (None: it can)."""
    if shutil.which("java") is None:
        return "no java on this machine (make test installs a JDK)"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} is missing (make test installs Debian's zookeeper package)"
    return None


def _die_with_parent() -> None:
    """In the JVM's child before exec: a killed test run takes its ZooKeeper servers along."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def four_letter(port: int, word: bytes, timeout_s: float = 1.0, host: str = "127.0.0.1") -> str:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word)
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class Ensemble:
    """`servers` ZooKeeper servers forming one ensemble; `connect` is klog's zookeeper.connect."""

    def __init__(self, workdir: Path, servers: int = 3, tick_ms: int = 500, *,
                 hosts: list[str] | None = None,
                 command_prefix: Callable[[int], list[str]] = lambda index: []):
        self.workdir = Path(workdir)
        if hosts is None:
            self.hosts = ["127.0.0.1"] * servers
            first = free_ports(3 * servers)
            ports = list(range(first, first + 3 * servers))
        else:
            self.hosts = list(hosts)
            servers = len(hosts)
            ports = [2181] * servers + [2888, 3888] * servers
        self.client_ports = ports[:servers]
        quorum = ports[servers:]
        self.command_prefix = command_prefix
        self.processes: dict[int, subprocess.Popen] = {}
        self.configs: dict[int, Path] = {}
        peers = "".join(f"server.{i + 1}={self.hosts[i]}:{quorum[2 * i]}:{quorum[2 * i + 1]}\n"
                        for i in range(servers))
        for i in range(servers):
            data = self.workdir / f"zk{i + 1}"
            data.mkdir(parents=True, exist_ok=True)
            (data / "myid").write_text(f"{i + 1}\n")
            config = data / "zoo.cfg"
            config.write_text(
                f"tickTime={tick_ms}\ninitLimit=20\nsyncLimit=10\ndataDir={data}\n"
                f"clientPort={self.client_ports[i]}\nclientPortAddress={self.hosts[i]}\n"
                f"maxSessionTimeout=60000\nminSessionTimeout={2 * tick_ms}\n"
                f"admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr,stat\n"
                f"electionPortBindRetry=20\n{peers}")
            self.configs[i] = config

    @property
    def connect(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.client_ports))

    def start(self, index: int | None = None, timeout_s: float = 60.0) -> Ensemble:
        for i in ([index] if index is not None else list(self.configs)):
            log = open(self.workdir / f"zk{i + 1}.log", "ab")  # noqa: SIM115 (the JVM holds it)
            self.processes[i] = subprocess.Popen(
                [*self.command_prefix(i), "java", "-Xmx96m", "-XX:+UseSerialGC", "-cp",
                 f"{CONF_DIR}:{ZOOKEEPER_JAR}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.configs[i])],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)
        self.wait_for_quorum(timeout_s)
        return self

    def serving(self) -> list[int]:
        return [i for i in self.processes
                if "Mode:" in four_letter(self.client_ports[i], b"srvr",
                                          host=self.hosts[i])]

    def wait_for_quorum(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.serving()) * 2 > len(self.configs):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the ZooKeeper ensemble has no quorum after {timeout_s} s:\n"
                           + self.log_tail())

    def stop(self, index: int) -> None:
        process = self.processes.pop(index, None)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def close(self) -> None:
        for index in list(self.processes):
            self.stop(index)

    def log_tail(self) -> str:
        out = []
        for i in self.configs:
            path = self.workdir / f"zk{i + 1}.log"
            if path.exists():
                out.append(f"-- zk{i + 1}: " + path.read_text(errors="replace")[-1500:])
        return "\n".join(out)
