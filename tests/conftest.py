"""Fixtures shared by every test layer: a real appliance process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the appliance's child before exec: a killed test run stops its appliances too
    (SIGTERM: the supervisor's graceful stop, so nothing is left in /dev/shm)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> int:
    """A first port such that `count` consecutive ports are free (worker i uses port + i)."""
    for _ in range(100):
        first = free_port()
        held = []
        try:
            for i in range(count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", first + i))
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports")


class Appliance:
    """An appliance run as `klog appliance run` in a child process, stopped by the test.

    By default it listens on 127.0.0.1 on free ports. A test that runs it elsewhere (in a
    network namespace of its own: tests/faults) gives its `host` and `port` and the
    `command_prefix` that puts the process there (`ip netns exec <ns>`, which execs the
    command: the pid, the signals and the parent-death signal are the appliance's own)."""

    def __init__(self, workdir: Path, *, log_dirs: int = 1, settings: dict | None = None,
                 host: str = "127.0.0.1", port: int | None = None,
                 command_prefix: tuple[str, ...] = ()):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port if port is not None else free_ports(log_dirs)
        self.command_prefix = tuple(command_prefix)
        self.log_dirs = [workdir / f"disk{i}" for i in range(log_dirs)]
        self.config = workdir / "server.properties"
        lines = {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://{host}:{self.port}",
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            "num.partitions": "1",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        # a second listener's ports: "{port2}" in a setting (e.g. listeners=A://h:{port},
        # B://h:{port2}) stands for a range of free ports apart from the first listener's
        self.port2 = None
        if any("{port2}" in str(v) for v in (settings or {}).values()):
            self.port2 = free_ports(log_dirs)
            while abs(self.port2 - self.port) < log_dirs:
                self.port2 = free_ports(log_dirs)
        lines.update({k: str(v).replace("{port}", str(self.port))
                      .replace("{port2}", str(self.port2)) for k, v in (settings or {}).items()})
        self.settings = lines
        self.config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        self.process: subprocess.Popen | None = None
        self.stderr_path = workdir / "appliance.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0, env: dict | None = None) -> Appliance:
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 (open while the child runs)
        self.process = subprocess.Popen(
            [*self.command_prefix, sys.executable, "-m", "klog_cli.main", "appliance", "run",
             "--config", str(self.config)],
            cwd=REPO, stdout=self._stderr, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})}, preexec_fn=_stop_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"appliance exited with {self.process.returncode}:\n"
                                   + self.stderr_path.read_text()[-4000:])
            # The supervisor binds the sockets before it forks, so accepting is not enough:
            # wait until every worker reports SERVING (and its pid is known) in shm.
            if all(self._accepts(p, self.host) for p in self.ports()) and self._all_serving():
                return self
            time.sleep(0.05)
        raise RuntimeError("appliance did not start listening:\n"
                           + self.stderr_path.read_text()[-4000:])

    @staticmethod
    def _accepts(port: int, host: str = "127.0.0.1") -> bool:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def _all_serving(self) -> bool:
        from appliance.config import load_config
        from appliance.shm.appliance_region import ApplianceRegion
        from appliance.shm.layout import WorkerState
        from appliance.shm.region import RegionError

        try:
            region = ApplianceRegion.open_status(load_config(self.config))
        except RegionError:
            return False
        try:
            workers = region.snapshot().workers  # only the slots the supervisor has filled
            return len(workers) == len(self.log_dirs) and all(
                w.pid > 0 and w.state == WorkerState.SERVING for w in workers)
        finally:
            region.close()

    def ports(self) -> list[int]:
        return [self.port + i for i in range(len(self.log_dirs))]

    def pids(self) -> dict[int, int]:
        """Worker index -> pid, from `klog status --json` style data in the shm region."""
        from appliance.config import load_config
        from appliance.shm.appliance_region import ApplianceRegion

        region = ApplianceRegion.open_status(load_config(self.config))
        try:
            return {w.index: w.pid for w in region.snapshot().workers}
        finally:
            region.close()

    def worker_pid(self, index: int) -> int:
        """A live worker's pid; never 0, which os.kill would take as the whole process group."""
        pid = self.pids()[index]
        assert pid > 0, f"worker {index} has no pid yet"
        return pid

    def stop(self, sig=signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            self._stderr.close()

    def kill(self) -> None:
        """kill -9 of the supervisor alone. Its workers see it gone and stop gracefully; they
        hold the log dirs' `.lock` until they exit, so a `start()` right after waits for them
        (within its timeout)."""
        self.stop(signal.SIGKILL)

    def log_text(self) -> str:
        return self.stderr_path.read_text()


# Consumer groups form at once instead of after Kafka's 3 s initial rebalance delay.
FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}


@contextlib.contextmanager
def running_appliance(workdir: Path, **kwargs):
    """An appliance for a whole test module (``yield from`` it in a module-scoped fixture)."""
    appliance = Appliance(workdir, **kwargs)
    appliance.start()
    try:
        yield appliance
    finally:
        appliance.stop()


@pytest.fixture(scope="module")
def group_appliance(tmp_path_factory, request):
    """Two workers (so two coordinators) and no initial rebalance delay, to keep joins quick:
    one per test module that works with consumer groups."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    with running_appliance(tmp_path_factory.mktemp(name), log_dirs=2,
                           settings=FAST_GROUPS) as started:
        yield started


def topic_maker(bootstrap: str, partitions: int = 1, prefix: str = "topic"):
    """``make(partitions, prefix, **configs) -> name``: a fresh topic (unique name) created with
    klog.Admin, for fixtures that share one appliance across tests."""
    import klog

    names = itertools.count()

    def make(partitions: int = partitions, prefix: str = prefix, **configs) -> str:
        name = f"{prefix}-{next(names)}"
        with klog.Admin(bootstrap) as admin:
            admin.create_topic(name, partitions,
                               configs={k.replace("_", "."): str(v) for k, v in configs.items()})
        return name

    return make


@pytest.fixture
def appliance_factory(tmp_path):
    started: list[Appliance] = []

    def make(**kwargs) -> Appliance:
        appliance = Appliance(tmp_path / f"appliance{len(started)}", **kwargs)
        started.append(appliance)
        return appliance.start()

    yield make
    for appliance in started:
        appliance.stop()


@pytest.fixture
def appliance(appliance_factory) -> Appliance:
    return appliance_factory()


def require_binary(name: str) -> str:
    path = subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
    if not path:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; `make test` installs it")
        pytest.skip(f"{name} is not installed (make test installs it)")
    return path
