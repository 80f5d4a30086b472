"""Running playbooks/cluster.yml against the booted hosts, and reading its recap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.deploy.hosts import Fleet

PLAYBOOK = REPO / "playbooks" / "cluster.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
# the fleet's klog_appliance_properties (server.properties keys)
PROPERTIES = {
    "num.partitions": 3, "default.replication.factor": 3, "min.insync.replicas": 2,
    "zookeeper.session.timeout.ms": 6000, "group.initial.rebalance.delay.ms": 0,
    # every replica's active segment is preallocated to log.segment.bytes: at Kafka's 1 GiB
    # the module's 20 partitions x 3 replicas took 60 GiB of the shared disk and filled it
    # (then produce is answered KAFKA_STORAGE_ERROR, which clients retry until they time out)
    "log.segment.bytes": 16 * 1024 * 1024, "log.index.size.max.bytes": 1024 * 1024,
}
# how long each step took, printed when the hosts are stopped
FIGURES: dict[str, float] = {}
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                   re.MULTILINE)


@dataclass
class Run:
    output: str
    seconds: float
    changed: dict[str, int]  # host -> changed tasks, from the PLAY RECAP


def inventory(fleet: Fleet, path: Path, extra: dict | None = None) -> Path:
    """Every host runs a ZooKeeper server and an appliance; h1 has two disks, so two workers.
    `extra`: more variables for the whole fleet (e.g. klog_security and its users)."""
    lines = ["all:", "  vars:", "    ansible_user: root",
             "    ansible_python_interpreter: /usr/bin/python3",
             f"    ansible_ssh_private_key_file: {fleet.key}",
             "    ansible_ssh_common_args: >-",
             "      -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
             "    zookeeper_heap: 96m", "    zookeeper_tick_time: 500",
             "    klog_appliance_properties:"]
    lines += [f"      {key}: {value}" for key, value in PROPERTIES.items()]
    # JSON is YAML
    lines += [f"    {key}: {json.dumps(value)}" for key, value in (extra or {}).items()]
    lines += ["  children:", "    zookeeper:", "      hosts:"]
    lines += [f"        {h.name}: {{ansible_host: {h.address}}}" for h in fleet.hosts]
    lines += ["    appliances:", "      hosts:"]
    for i, host in enumerate(fleet.hosts):
        disks = [f"/srv/klog/disk{d}" for d in range(2 if i == 0 else 1)]
        lines.append(f"        {host.name}: {{klog_appliance_broker_id: {i + 1}, "
                     f"klog_appliance_rack: rack-{i % 2}, "
                     f"klog_appliance_disks: [{', '.join(disks)}]}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def run_playbook(inventory_path: Path, log: Path, *args: str, timeout_s: float = 900) -> Run:
    """ansible-playbook; a failed run raises with the end of its output."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_PIPELINING": "1", "ANSIBLE_HOST_KEY_CHECKING": "False",
           # Ansible's ssh arguments less -C: compressing the module payloads and wheels for
           # a veth costs the shared cores and saves nothing
           "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s",
           "ANSIBLE_LOCAL_TEMP": str(log.parent / "ansible-local"),
           "PATH": f"{ANSIBLE_PLAYBOOK.parent}:{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory_path), str(PLAYBOOK), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    with log.open("a") as f:
        f.write(f"\n===== ansible-playbook {' '.join(args)} ({seconds:.0f} s)\n{output}")
    if done.returncode != 0:
        raise AssertionError(f"ansible-playbook {' '.join(args)} failed ({done.returncode}):\n"
                             + output[-6000:])
    changed = {m.group(1): int(m.group(3)) for m in RECAP.finditer(output)}
    return Run(output, seconds, changed)


def wipe(fleet: Fleet) -> None:
    """Undo a deployment an earlier module made on the hosts (services stopped, klog's config,
    data and ZooKeeper's data gone), so the next deploys a fresh fleet; klog's venv stays.

    The services are killed, not stopped (their data goes next, so a clean stop keeps
    nothing), on every host at once: stopping them one host after the other took 35 s, the
    appliances waiting on ZooKeeper ensembles that were stopping too. A killed appliance
    leaves its shared-memory regions: they go with the data."""
    with ThreadPoolExecutor(len(fleet.hosts)) as pool:
        list(pool.map(lambda host: host.ssh(
            fleet.key, "systemctl kill --signal=KILL klog-appliance zookeeper 2>/dev/null; "
            "systemctl stop klog-appliance zookeeper 2>/dev/null; "
            "rm -rf /etc/klog /srv/klog /var/lib/zookeeper/version-2 /dev/shm/klog-*; true"),
            fleet.hosts))
