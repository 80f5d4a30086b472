"""Booted Debian hosts on this machine: systemd-nspawn containers, one network namespace each.

Every name this module creates starts with PREFIX, so a run killed before its finalizers ran
is cleaned up by the next one (`clean_leftovers`). The layout:

    root namespace  -- veth kdep-ctl (10.77.0.254/24) --+
    kdep-h1 (10.77.0.11) -- veth --+                    |
    kdep-h2 (10.77.0.12) -- veth --+-- bridge br0 in namespace kdep-sw
    kdep-h3 (10.77.0.13) -- veth --+

so the test, Ansible and the Kafka clients reach the hosts from the root namespace, and the
hosts reach each other. Each host boots the cached root filesystem read-only under its own
overlay (systemd as PID 1), with sshd accepting a throwaway key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "kdep-"
SWITCH = f"{PREFIX}sw"
SUBNET = "10.77.0"
CONTROL_ADDRESS = f"{SUBNET}.254"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def unavailable_reason() -> str | None:
    """Why this machine cannot boot the hosts at all, or None."""
    if os.geteuid() != 0:
        return "booting hosts with systemd-nspawn and network namespaces needs root"
    for tool in ("debootstrap", "systemd-nspawn", "ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs debootstrap, systemd-container)"
    probe = f"{PREFIX}probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces are not available here: {made.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


def _nspawn_pids() -> list[int]:
    """systemd-nspawn processes of this module (by their --machine=kdep-... argument)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"systemd-nspawn") and any(
                a.startswith(f"--machine={PREFIX}".encode()) for a in argv):
            pids.append(int(entry.name))
    return pids


def _running(pid: int) -> bool:
    """The process exists and has not exited: an exited child that its parent has not waited
    for yet (a zombie, such as a Fleet's own systemd-nspawn) keeps its /proc entry."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _stop_pids(pids: list[int], timeout_s: float = 20) -> None:
    """Ask containers to power off (SIGTERM to nspawn), then kill those that linger."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _kill_namespace(namespace: str) -> None:
    """SIGKILL whatever still runs in a host's namespace: a container whose systemd-nspawn was
    killed (the SIGKILL of `_stop_pids`) keeps running under PID 1, its appliance included."""
    for pid in run("ip", "netns", "pids", namespace, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def clean_leftovers() -> None:
    """Containers, namespaces and veths left by an earlier run that died before cleaning up."""
    _stop_pids(_nspawn_pids(), timeout_s=10)
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            _kill_namespace(name)
            run("ip", "netns", "del", name, check=False)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX):
            run("ip", "link", "del", name, check=False)


@dataclass
class Host:
    name: str  # inventory name (h1)
    address: str
    namespace: str
    upper: Path
    process: subprocess.Popen | None = None

    @property
    def machine(self) -> str:
        return f"{PREFIX}{self.name}"

    def ssh(self, key: Path, command: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(["ssh", *ssh_options(key), f"root@{self.address}", command],
                              capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name}: {command!r} exited with {done.returncode}: "
                               f"{done.stderr.strip()} {done.stdout.strip()[-2000:]}")
        return done


def ssh_options(key: Path) -> list[str]:
    return ["-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes"]


class Fleet:
    """The switch, the control veth and the booted hosts; `close` undoes all of it."""

    def __init__(self, workdir: Path, rootfs: Path, names: list[str]):
        self.workdir = workdir
        self.rootfs = rootfs
        self.key = workdir / "id_ed25519"
        self.hosts = [Host(name, f"{SUBNET}.{11 + i}", f"{PREFIX}{name}",
                           workdir / f"{name}.upper") for i, name in enumerate(names)]

    def start(self, timeout_s: float = 180) -> None:
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        run("ip", "netns", "add", SWITCH)
        run("ip", "-n", SWITCH, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", SWITCH, "link", "set", "br0", "up")
        self._cable(None, "ctl", CONTROL_ADDRESS)
        for host in self.hosts:
            run("ip", "netns", "add", host.namespace)
            run("ip", "-n", host.namespace, "link", "set", "lo", "up")
            self._cable(host.namespace, host.name, host.address)
            self._boot(host)
        deadline = time.monotonic() + timeout_s
        for host in self.hosts:
            self._wait_booted(host, deadline)

    def _cable(self, namespace: str | None, name: str, address: str) -> None:
        """A veth from `namespace` (None: the root namespace) to the switch's bridge."""
        inside, port = f"{PREFIX}{name}", f"{PREFIX}{name}-p"
        run("ip", "link", "add", inside, "type", "veth", "peer", "name", port)
        run("ip", "link", "set", port, "netns", SWITCH)
        run("ip", "-n", SWITCH, "link", "set", port, "master", "br0", "up")
        if namespace is None:
            run("ip", "addr", "add", f"{address}/24", "dev", inside)
            run("ip", "link", "set", inside, "up")
        else:
            run("ip", "link", "set", inside, "netns", namespace)
            run("ip", "-n", namespace, "link", "set", inside, "name", "eth0")
            run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            run("ip", "-n", namespace, "link", "set", "eth0", "up")

    def _boot(self, host: Host) -> None:
        ssh_dir = host.upper / "root" / ".ssh"
        ssh_dir.mkdir(parents=True, mode=0o700)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        (host.upper / "etc").mkdir(exist_ok=True)
        (host.upper / "etc" / "hostname").write_text(f"{host.name}\n")
        (host.upper / "etc" / "hosts").write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{h.address} {h.name}\n" for h in self.hosts))
        log = open(self.workdir / f"{host.name}.console", "wb")  # noqa: SIM115 (child's stdout)
        host.process = subprocess.Popen(
            ["systemd-nspawn", "-q", "-D", str(self.rootfs),
             f"--overlay={self.rootfs}:{host.upper}:/", "--boot", "--register=no",
             "--keep-unit", f"--network-namespace-path=/run/netns/{host.namespace}",
             f"--machine={host.machine}", f"--hostname={host.name}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _wait_booted(self, host: Host, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            if host.process.poll() is not None:
                raise RuntimeError(f"{host.name}: systemd-nspawn exited with "
                                   f"{host.process.returncode}: " + self.console(host))
            if _accepts(host.address, 22):
                done = host.ssh(self.key, "systemctl is-system-running --wait", check=False,
                                timeout=max(5.0, deadline - time.monotonic()))
                last = done.stdout.strip() + done.stderr.strip()
                if last in ("running", "degraded"):
                    return
            time.sleep(0.5)
        raise RuntimeError(f"{host.name} did not boot (last state {last!r}): "
                           + self.console(host))

    def console(self, host: Host) -> str:
        return (self.workdir / f"{host.name}.console").read_text(errors="replace")[-3000:]

    def close(self) -> None:
        """Every host killed, then its network, then its overlay. Nothing of a host outlives
        the test, so a clean power-off (its services stopped one by one) buys nothing."""
        for host in self.hosts:
            # the container's init included: its systemd-nspawn then exits at once
            _kill_namespace(host.namespace)
        running = [h.process for h in self.hosts if h.process and h.process.poll() is None]
        _stop_pids([p.pid for p in running])
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        for host in self.hosts:
            _kill_namespace(host.namespace)
            run("ip", "netns", "del", host.namespace, check=False)
        run("ip", "link", "del", f"{PREFIX}ctl", check=False)
        run("ip", "netns", "del", SWITCH, check=False)
        for host in self.hosts:
            shutil.rmtree(host.upper, ignore_errors=True)


def _accepts(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=1).close()
        return True
    except OSError:
        return False
