"""The rest of an appliance's surface on its own host (issue 22): what it writes is readable
only by its user (log dirs and what is in them: 0700 directories and 0600 files where klog
creates them; the shm region 0600), its control channel is socketpairs no other process can
open (no path in the file system), and the metrics endpoint listens on 127.0.0.1 unless
`metrics.host` says otherwise. Checked with os.stat and /proc on a running appliance that
has written: topics, records, a committed group offset."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from appliance.config import load_config
from appliance.shm.appliance_region import region_name_for
from tests.conftest import FAST_GROUPS, Appliance, free_port
from tests.polling import wait_until

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def appliance(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("local-surface")
    metrics_port = free_port()
    started = Appliance(workdir, log_dirs=2, settings={"metrics.port": str(metrics_port),
                                                       "num.partitions": "2", **FAST_GROUPS})
    started.metrics_port = metrics_port
    old = os.umask(0o022)  # the usual umask, whatever the test runner's: klog must not rely on it
    try:
        started.start()
    finally:
        os.umask(old)
    producer = Producer({"bootstrap.servers": started.bootstrap})
    for i in range(100):
        producer.produce("surface", value=b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": started.bootstrap, "group.id": "surface",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["surface"])
    wait_until(lambda: got_one(consumer), 30, "a record in the group")
    consumer.commit(asynchronous=False)
    consumer.close()
    yield started
    started.stop()


def got_one(consumer) -> bool:
    message = consumer.poll(0.5)
    return message is not None and message.error() is None


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_log_dirs_and_everything_in_them_are_the_appliance_users_only(appliance):
    checked = 0
    for log_dir in appliance.log_dirs:  # created by klog: they did not exist before it ran
        for root, _dirs, files in os.walk(log_dir):
            assert mode(Path(root)) == 0o700, f"{root}: {oct(mode(Path(root)))}"
            for name in files:
                path = Path(root) / name
                assert mode(path) & 0o077 == 0, f"{path}: {oct(mode(path))}"
                checked += 1
    assert checked >= 6  # segments, indexes, the catalog, meta.properties ...
    assert any(p.name.endswith(".log") for d in appliance.log_dirs for p in d.rglob("*"))


def test_the_shm_region_is_the_appliance_users_only(appliance):
    name = region_name_for(load_config(appliance.config))
    assert mode(Path("/dev/shm") / name.lstrip("/")) == 0o600


def appliance_pids(appliance) -> list[int]:
    return [appliance.process.pid, *appliance.pids().values()]


def unix_paths_by_inode() -> dict[int, str]:
    """/proc/net/unix: inode -> bound path ("" when none: socketpairs, unbound clients)."""
    out = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        out[int(parts[6])] = parts[7] if len(parts) > 7 else ""
    return out


def test_the_control_channel_has_no_path_another_process_could_open(appliance):
    paths = unix_paths_by_inode()
    unix_sockets = 0
    for pid in appliance_pids(appliance):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue  # closed meanwhile
            inode = re.fullmatch(r"socket:\[(\d+)\]", target)
            if inode and int(inode[1]) in paths:
                unix_sockets += 1
                assert paths[int(inode[1])] == "", f"pid {pid} has a Unix socket at a path"
    assert unix_sockets >= 4  # a control socketpair end per worker, at both ends


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on `port` (/proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_the_metrics_endpoint_listens_on_loopback_only(appliance):
    assert listening_addresses(appliance.metrics_port) == {"0100007F"}  # 127.0.0.1


def test_metrics_host_opens_it_elsewhere(tmp_path):
    """The default is checked above; an operator's `metrics.host` is honoured (0.0.0.0: all)."""
    assert load_config_of({"metrics.port": "9", "metrics.host": "0.0.0.0"},
                          tmp_path).metrics_host == "0.0.0.0"
    assert load_config_of({"metrics.port": "9"}, tmp_path).metrics_host == "127.0.0.1"


def load_config_of(settings: dict, tmp_path: Path):
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in {
        "broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": str(tmp_path / "d"), **settings}.items()))
    return load_config(path)
