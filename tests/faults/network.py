"""Hosts on one machine for the fault tests: a network namespace per host on one bridge, and
iptables partitions inside a host's namespace.

Every name this module creates starts with PREFIX (`kflt-`, tests/deploy uses `kdep-`, and
the subnets differ too), so a run killed before its finalizers ran is swept by the next one
(`sweep`: the processes still running in those namespaces, the namespaces, the veths). The
layout, as tests/deploy/hosts.py builds it for booted hosts:

    root namespace  -- veth kflt-ctl (10.78.0.254/24) --+
    kflt-a1 (10.78.0.11) -- veth --+                    |
    kflt-a2 (10.78.0.12) -- veth --+-- bridge br0 in namespace kflt-sw
    ...                            |
    kflt-z1 (10.78.0.21) -- veth --+

so the test process and its Kafka and ZooKeeper clients reach every host from the root
namespace through the control address, and the hosts reach each other. A partition
(`cut`) drops a host's traffic to and from chosen addresses of the subnet with iptables in
that host's namespace only; the control address is never cut, so the test keeps seeing
(and its clients keep talking to) a partitioned host, as a client outside the partition
would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass

PREFIX = "kflt-"
SWITCH = f"{PREFIX}sw"
SUBNET = "10.78.0"
CONTROL_ADDRESS = f"{SUBNET}.254"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: "
                           f"{done.stderr.strip()}")
    return done


def unavailable_reason() -> str | None:
    """Why this machine cannot build the hosts (not root, no netns or iptables), or None."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs iptables)"
    probe = f"{PREFIX}probe"
    made = run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces are not available here: {made.stderr.strip()}"
    try:
        listed = run("ip", "netns", "exec", probe, "iptables", "-L", "-n", check=False)
        if listed.returncode != 0:
            return f"iptables does not work in a network namespace: {listed.stderr.strip()}"
    finally:
        run("ip", "netns", "del", probe, check=False)
    return None


def _namespaces() -> list[str]:
    names = []
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            names.append(name)
    return names


def sweep() -> None:
    """What an earlier run left: processes in our namespaces (SIGCONT then SIGKILL: a stopped
    one must die too), the namespaces, and the veths in the root namespace."""
    for namespace in _namespaces():
        for pid in run("ip", "netns", "pids", namespace, check=False).stdout.split():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), sig)
        run("ip", "netns", "del", namespace, check=False)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX):
            run("ip", "link", "del", name, check=False)


@dataclass(frozen=True)
class Host:
    name: str  # a1, z1, ...
    address: str

    @property
    def namespace(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def command_prefix(self) -> tuple[str, ...]:
        """Run a command inside the host (`ip netns exec` execs it: same pid, same signals)."""
        return ("ip", "netns", "exec", self.namespace)


class Network:
    """The switch, the control veth and the hosts; `close` undoes all of it."""

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self._started = False

    def start(self) -> Network:
        run("ip", "netns", "add", SWITCH)
        self._started = True
        run("ip", "-n", SWITCH, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", SWITCH, "link", "set", "br0", "up")
        self._cable(None, "ctl", CONTROL_ADDRESS)
        return self

    def add_host(self, name: str, last_octet: int) -> Host:
        host = Host(name, f"{SUBNET}.{last_octet}")
        run("ip", "netns", "add", host.namespace)
        self.hosts[name] = host
        run("ip", "-n", host.namespace, "link", "set", "lo", "up")
        self._cable(host.namespace, name, host.address)
        return host

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

    # partitions ---------------------------------------------------------------------------

    def cut(self, name: str, addresses: list[str]) -> None:
        """Drop every packet between host `name` and `addresses` (both ways, in its own
        namespace): established connections stall as on a real partition, new ones time out."""
        namespace = self.hosts[name].namespace
        for address in addresses:
            run("ip", "netns", "exec", namespace, "iptables", "-A", "OUTPUT", "-d", address,
                "-j", "DROP")
            run("ip", "netns", "exec", namespace, "iptables", "-A", "INPUT", "-s", address,
                "-j", "DROP")

    def heal(self, name: str) -> None:
        """Remove every rule of host `name` (its namespace holds ours only)."""
        namespace = self.hosts[name].namespace
        run("ip", "netns", "exec", namespace, "iptables", "-F", "OUTPUT")
        run("ip", "netns", "exec", namespace, "iptables", "-F", "INPUT")

    def rules(self, name: str) -> str:
        return run("ip", "netns", "exec", self.hosts[name].namespace, "iptables", "-S").stdout

    def close(self) -> None:
        for host in self.hosts.values():
            run("ip", "netns", "del", host.namespace, check=False)
        if self._started:
            run("ip", "link", "del", f"{PREFIX}ctl", check=False)
            run("ip", "netns", "del", SWITCH, check=False)
        self.hosts.clear()
