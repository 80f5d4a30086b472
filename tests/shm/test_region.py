"""The region's life cycle with real processes: create, attach (read-write and read-only),
unlink leaving nothing in /dev/shm, refusal while the creator lives, reclaim after kill -9 (even
before the dead creator is reaped), recycled pids, garbage objects, and the appliance's
role-level calls driven by a forked worker."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from appliance.shm import (
    Geometry,
    RegionError,
    RegionInUseError,
    RegionLayoutError,
    RegionNotFoundError,
    RegionSpaceError,
    WorkerState,
    attach_region,
    create_region,
    region,
)
from appliance.shm.appliance_region import ApplianceRegion, region_name_for

from .conftest import shm_names

REPO = Path(__file__).resolve().parents[2]
GEOMETRY = Geometry(max_workers=2, max_partitions=16, index_entries=4)
FORK = multiprocessing.get_context("fork")
CREATOR = """
import sys
from appliance.shm import Geometry, create_region
region = create_region(sys.argv[1], Geometry(2, 16, 4), broker_id=7)
print("ready", flush=True)
if sys.stdin.readline().strip() == "stop":
    region.unlink()
"""

pytestmark = pytest.mark.timeout(60)


def _dev_shm(name: str) -> str:
    return name.lstrip("/")


def _start_creator(name: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CREATOR, name], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_create_attach_unlink(shm_name):
    created = create_region(shm_name, GEOMETRY, broker_id=7)
    assert _dev_shm(shm_name) in shm_names()
    assert os.stat(f"/dev/shm/{_dev_shm(shm_name)}").st_size == GEOMETRY.total_bytes
    assert created.header.supervisor_pid == os.getpid() and created.header.broker_id == 7
    slot = created.partitions.allocate_partition("t", 0, owner=1)
    with attach_region(shm_name) as attached:
        assert attached.partitions.find("t", 0) == slot and attached.geometry == GEOMETRY
    reader = attach_region(shm_name, read_only=True)
    with pytest.raises(TypeError):
        reader.partitions.publish_partition(slot, 1, 0, 0, 0, 0, 0, 0)
    with pytest.raises(RegionError, match="read-only"):
        reader.unlink()
    created.unlink()
    assert _dev_shm(shm_name) not in shm_names()
    assert reader.partitions.read_partition(slot).topic == "t"  # mappings outlive the name
    with pytest.raises(RegionNotFoundError, match="no appliance with this config"):
        attach_region(shm_name, read_only=True)
    reader.close()
    created.close()
    created.close()  # idempotent


def test_refused_while_the_creator_lives_reclaimed_after_kill_9(shm_name):
    proc = _start_creator(shm_name)
    try:
        with pytest.raises(RegionInUseError, match=f"already running, pid {proc.pid}") as info:
            create_region(shm_name, GEOMETRY)
        assert info.value.pid == proc.pid
        with attach_region(shm_name, read_only=True) as status:  # `klog status` meanwhile
            assert status.header.supervisor_pid == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
            assert time.monotonic() < deadline
            time.sleep(0.005)
        # not reaped yet: the zombie still has its pid, but it is dead
        fresh = create_region(shm_name, GEOMETRY)
        assert fresh.reclaimed_from_pid == proc.pid
        assert fresh.header.supervisor_pid == os.getpid()
        assert fresh.partitions.slots() == {}
    finally:
        proc.kill()
        proc.wait()
    fresh.unlink()
    fresh.close()
    assert _dev_shm(shm_name) not in shm_names()


def test_a_clean_stop_leaves_nothing(shm_name):
    proc = _start_creator(shm_name)
    assert _dev_shm(shm_name) in shm_names()
    proc.communicate("stop\n", timeout=10)
    assert proc.returncode == 0
    assert not [n for n in shm_names() if n.startswith(_dev_shm(shm_name))]


def test_a_recycled_pid_is_not_a_live_supervisor(shm_name):
    first = create_region(shm_name, GEOMETRY)
    first.buf[48:56] = (first.header.supervisor_start_ticks + 1).to_bytes(8, "little")
    first.close()  # our pid is alive, but "started" at another time: not the creator
    second = create_region(shm_name, GEOMETRY)
    assert second.reclaimed_from_pid == os.getpid()
    second.unlink()
    second.close()


def test_garbage_under_the_name(shm_name):
    path = Path("/dev/shm") / _dev_shm(shm_name)
    path.write_bytes(b"not klog" * 1000)
    with pytest.raises(RegionLayoutError, match="magic"):
        attach_region(shm_name, read_only=True)
    with pytest.raises(RegionInUseError, match="being created"):  # young: maybe mid-creation
        create_region(shm_name, GEOMETRY)
    old = time.time() - 60
    os.utime(path, (old, old))
    fresh = create_region(shm_name, GEOMETRY)
    assert fresh.reclaimed_from_pid == 0
    fresh.unlink()
    fresh.close()


def test_attach_refuses_another_layout_version(shm_name):
    created = create_region(shm_name, GEOMETRY)
    created.buf[8] = 99
    with pytest.raises(RegionLayoutError, match="layout version 99"):
        attach_region(shm_name)
    created.unlink()
    created.close()


def test_no_room_in_dev_shm_fails_cleanly(shm_name, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(region.os, "posix_fallocate", full)
    with pytest.raises(RegionSpaceError, match=r"MiB.*No space left.*shm-size"):
        create_region(shm_name, GEOMETRY)
    assert _dev_shm(shm_name) not in shm_names()


class FakeController:
    def __init__(self, topics):
        self._topics = dict(topics)
        self.listeners = []

    def topics(self):
        return list(self._topics.values())

    def add_listener(self, listener):
        self.listeners.append(listener)

    def change(self, name, owners):
        info = None if owners is None else SimpleNamespace(name=name, owners=tuple(owners))
        self._topics.pop(name, None)
        if info is not None:
            self._topics[name] = info
        for listener in self.listeners:
            listener(name, info)


def _worker(name: str, index: int, stop) -> None:
    appliance = ApplianceRegion.attach(name)
    appliance.heartbeat(index)
    table = appliance.partitions
    for slot in table.owned_by(index):  # re-attach to what this worker owns
        epoch = table.slot_info(slot).epoch
        table.publish_partition(slot, epoch, 0, 10 + slot, 10 + slot, 0, 100, 100,
                                ((5, 40),), 10 + slot, 100)
    appliance.worker_serving(index)
    stop.wait(10)
    appliance.worker_stopping(index)


def test_the_appliance_calls(tmp_path):
    config = SimpleNamespace(broker_id=3, log_dirs=(tmp_path / "d0", tmp_path / "d1"),
                             first_listener=SimpleNamespace(port=19092), shm_max_partitions=32)
    name = region_name_for(config)
    appliance = ApplianceRegion.create(config)
    try:
        assert appliance.region.geometry == Geometry(2, 32, 64)
        controller = FakeController({"a": SimpleNamespace(name="a", owners=(0, 1))})
        appliance.follow(controller)
        controller.change("b", [1])
        controller.change("a", [0, 0])  # partition 1 moved to worker 0
        controller.change("c", [0])
        controller.change("c", None)  # deleted
        table = appliance.partitions
        assert sorted(table.slots()) == [("a", 0), ("a", 1), ("b", 0)]
        assert [table.slot_info(table.find("a", p)).owner for p in (0, 1)] == [0, 0]

        stop = FORK.Event()
        appliance.worker_starting(1, restarts=0)
        child = FORK.Process(target=_worker, args=(name, 1, stop))
        child.start()
        appliance.worker_forked(1, child.pid)
        deadline = time.monotonic() + 10
        while appliance.workers.read_worker(1).state != WorkerState.SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert appliance.heartbeat_age_s(1) < 5
        view = table.read_partition(table.find("b", 0))
        assert view.high_watermark == 10 + view.slot and view.lookup(7) == (0, 40)

        status = ApplianceRegion.open_status(config)
        snap = status.snapshot().to_dict()
        assert [w["state"] for w in snap["workers"]] == ["SERVING"]
        assert snap["workers"][0]["port"] == 19093
        assert snap["workers"][0]["log_dir"] == str(tmp_path / "d1")
        assert [(p["topic"], p["partition"]) for p in snap["partitions"]] == [
            ("a", 0), ("a", 1), ("b", 0)]
        with pytest.raises(RegionInUseError):
            ApplianceRegion.create(config)
        stop.set()
        child.join(10)
        assert status.workers.read_worker(1).reported_state == WorkerState.STOPPING
        appliance.worker_exited(1, failed=False)
        assert status.workers.read_worker(1).state == WorkerState.DEAD
        status.close()
    finally:
        appliance.unlink()
    assert _dev_shm(name) not in shm_names()


def test_placement_follows_owners_through_changes_that_move_nothing(tmp_path):
    """A change with the owners already placed (a leadership or ISR change) leaves the slots
    as they are without walking the table; a move, a deletion and a topic created again
    under the same name with the same owners are each placed anew."""
    config = SimpleNamespace(broker_id=4, log_dirs=(tmp_path / "d0", tmp_path / "d1"),
                             first_listener=SimpleNamespace(port=19192), shm_max_partitions=32)
    appliance = ApplianceRegion.create(config)
    try:
        table = appliance.partitions
        controller = FakeController({"a": SimpleNamespace(name="a", owners=(0, 1))})
        appliance.follow(controller)
        placed = {key: table.slot_info(slot) for key, slot in table.slots().items()}
        controller.change("a", [0, 1])  # leaders moved, replicas did not
        assert {key: table.slot_info(slot) for key, slot in table.slots().items()} == placed
        controller.change("a", [0, 0])
        assert table.slot_info(table.find("a", 1)).owner == 0
        controller.change("a", None)
        assert table.slots() == {}
        controller.change("a", [0, 0])  # the same name and owners, a new topic
        assert sorted(table.slots()) == [("a", 0), ("a", 1)]
    finally:
        appliance.unlink()


def test_refuse_if_in_use_asks_without_reclaiming(shm_name):
    """What the supervisor asks before it waits for its log dirs' locks: a live creator is
    refused at once; a dead one's region is left for create_region to reclaim later."""
    region.refuse_if_in_use(shm_name)  # nothing there: not in use
    proc = _start_creator(shm_name)
    try:
        with pytest.raises(RegionInUseError, match=f"already running, pid {proc.pid}"):
            region.refuse_if_in_use(shm_name)
    finally:
        proc.kill()
        proc.wait()
    region.refuse_if_in_use(shm_name)  # its creator is dead
    assert _dev_shm(shm_name) in shm_names(), "asking must not unlink it"
