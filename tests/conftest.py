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
from xdist.scheduler import LoadScopeScheduling

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the appliance's child before exec: a killed test run stops its appliances too
    (SIGTERM: the supervisor's graceful stop, so nothing is left in /dev/shm)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _port_slice() -> range:
    """The ports this test process hands out: a slice, of its own, of the ports below the
    kernel's ephemeral range.

    A port that is free when asked for is bound later by the appliance or ZooKeeper it is
    for. Below the ephemeral range, no outgoing connection can take it meanwhile; a slice
    per pytest-xdist worker keeps two test processes from handing out the same port."""
    try:
        first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range")
                              .read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768
    low, high = 10000, min(first_ephemeral, 65536)
    if high - low < 2000:
        return range(0)  # an odd range: let the kernel choose, as a lone process may
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    size = (high - low) // max(workers, 1)
    return range(low + index * size, low + (index + 1) * size)


_PORTS = _port_slice()
_next_port = itertools.count(os.getpid() % max(len(_PORTS), 1))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """A first port such that `count` consecutive ports are free (worker i uses port + i)."""
    if not _PORTS:
        for _ in range(100):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                first = s.getsockname()[1]
            if all(_bindable(first + i) for i in range(1, count)):
                return first
        raise RuntimeError(f"no {count} consecutive free ports")
    for _ in range(len(_PORTS)):
        index = next(_next_port) % len(_PORTS)
        if index + count > len(_PORTS):
            continue  # past the slice's end: wrap around
        first = _PORTS[index]
        if all(_bindable(first + i) for i in range(count)):
            for _ in range(count - 1):
                next(_next_port)  # the next call starts past this run of ports
            return first
    raise RuntimeError(f"no {count} consecutive free ports in {_PORTS}")


def free_port() -> int:
    return free_ports(1)


# every appliance this test process started: the regions they leave are swept at the end
_STARTED: list[Appliance] = []


def _mapped_shm_names() -> set[str]:
    """The names of the klog regions some process on this host still maps."""
    names = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            for line in maps.read_text().splitlines():
                at = line.find("/dev/shm/klog-")
                if at >= 0:
                    names.add(line[at + len("/dev/shm/"):].split()[0])
    return names


@pytest.fixture(scope="session", autouse=True)
def _sweep_shm_regions():
    """A supervisor killed with SIGKILL (the fault tests do it on purpose) cannot unlink its
    shared-memory region. A start reclaims it (tests/appliance/test_supervisor.py checks
    that), but the region of an appliance never started again outlived the run: 16 MB of
    this host's memory in /dev/shm each, six of them after one `make test`. At the end of
    the session, the regions of this process's appliances that no process maps any longer
    go. Only its own: another pytest-xdist worker's appliances may be between a kill and
    the start that reclaims."""
    yield
    from appliance.config import load_config
    from appliance.shm.region import region_name, unlink_region

    left = []
    for appliance in _STARTED:
        if appliance.process is not None and appliance.process.poll() is None:
            continue  # still running: stopped with this process (_stop_with_parent)
        with contextlib.suppress(Exception):  # a test may have broken its config on purpose
            config = load_config(appliance.config)
            name = region_name(config.broker_id, config.log_dirs[0])
            if Path("/dev/shm", name.lstrip("/")).exists():
                left.append(name)
    if left:
        mapped = _mapped_shm_names()
        for name in left:
            if name.lstrip("/") not in mapped:
                unlink_region(name)


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

    def start(self, timeout_s: float = 60.0, env: dict | None = None) -> Appliance:
        # the time allowed to come up, not a measure of it: a loaded 2-core host has
        # taken more than 20 s
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 (open while the child runs)
        if self not in _STARTED:
            _STARTED.append(self)
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


# Modules whose hosts have fixed names and addresses (kdep-* on 10.77.0.0/24, kflt-* on
# 10.78.0.0/24), each module sweeping what an earlier run of its family left: under
# pytest-xdist one worker runs each family's modules one after the other.
_SERIAL_FAMILIES = ("tests/deploy/", "tests/faults/")


def _work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole: a test module, or one of the families."""
    path = nodeid.split("::", 1)[0]
    for family in _SERIAL_FAMILIES:
        if path.startswith(family):
            return family
    return path


class _ModulesAndFamilies(LoadScopeScheduling):
    """`make test`'s scheduler (pytest-xdist): a module runs whole on one worker, so its
    module-scoped appliances and fleets start once, and each family above runs on one worker.
    (The `xdist_group` mark would say the same, but pytest 9 renamed the node id attribute
    that pytest-xdist 3.8 rewrites for it.)"""

    def _split_scope(self, nodeid: str) -> str:
        return _work_unit(nodeid)


def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadscope":
        return _ModulesAndFamilies(config, log)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist the families, the longest work units, are queued first (with
    `--no-loadscope-reorder` the queue keeps this order), so that they do not start last and
    leave one worker running alone at the end."""
    if not hasattr(config, "workerinput"):
        return
    families = {family: rank for rank, family in enumerate(_SERIAL_FAMILIES)}
    items.sort(key=lambda item: families.get(_work_unit(item.nodeid), len(families)))
