"""`klog demo-cluster` (`make run-cluster`) stopped by a signal instead of Ctrl-C in a terminal:
it must stop its three appliances, then ZooKeeper, and exit, leaving no process behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, free_ports

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None
                       or not Path("/usr/share/java/zookeeper.jar").exists(),
                       reason="needs Java and Debian's zookeeper (make test installs them)"),
]


def _processes_under(root: Path) -> list[str]:
    """Processes whose command line names a file under ``root``: the demo's ZooKeeper (its
    zoo.cfg) and appliances (their config; a supervisor's forked workers and fork server
    keep its command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # exited meanwhile
        if str(root) in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _wait_for_line(process: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"no {text!r} from the demo; it printed:\n{''.join(seen)}")


@pytest.mark.parametrize(("signum", "when"), [
    (signal.SIGTERM, "Ctrl-C stops"),          # serving after the show: the reported leak
    (signal.SIGHUP, "appliance 2 stops"),      # midway through the show
])
def test_a_signal_stops_the_appliances_then_zookeeper_and_exits(tmp_path, signum, when):
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "klog_cli.main", "demo-cluster", "--port", str(free_ports(6)),
         "--zookeeper-port", str(free_port())],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root = tmp_path / "var" / "fleet"
    try:
        _wait_for_line(demo, when, timeout_s=240)
        assert len(_processes_under(root)) >= 4  # ZooKeeper and three supervisors, at least
        demo.send_signal(signum)
        rest, _ = demo.communicate(timeout=180)
        assert demo.returncode == 0, rest
        assert "stopping the appliances, then ZooKeeper" in rest
        assert _processes_under(root) == []
    finally:
        if demo.poll() is None:
            demo.kill()
        for leftover in _processes_under(root):
            os.kill(int(leftover.split(":")[0]), signal.SIGKILL)
