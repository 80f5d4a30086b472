"""The log dirs' `.lock` with real appliances: a second appliance on a dir in use is refused
and touches nothing; after a kill -9 of the supervisor alone, a new appliance waits for the old
workers (they hold the lock) and then serves every acknowledged record; a crashed worker is
restarted and holds the locks again; offline tools work while the appliance runs."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from appliance.config import load_config
from appliance.log_dir_lock import LOCK_FILE, try_lock
from appliance.shm.appliance_region import region_name_for
from tests.appliance.test_supervisor import _alive, produce_acked, read_everything, shm_names
from tests.cli.test_appliance_cli import klog
from tests.conftest import Appliance, free_port
from tests.interop.helpers import create_topic

pytestmark = pytest.mark.slow

REFUSAL = "another klog appliance (or its workers) is using this directory"
WAITING = "waiting up to"


def files_of(log_dirs) -> dict[str, bytes]:
    """Every file under the log dirs and its bytes (the segments are preallocated: the bytes
    say more than sizes and times)."""
    return {str(p): p.read_bytes() for d in log_dirs for p in sorted(Path(d).rglob("*"))
            if p.is_file()}


def holds_lock_of(pid: int, log_dir: Path) -> bool:
    target = str((log_dir / LOCK_FILE).resolve())
    fds = Path(f"/proc/{pid}/fd")
    return any(os.readlink(fd) == target for fd in fds.iterdir())


def test_a_second_appliance_on_a_log_dir_in_use_is_refused_and_touches_nothing(
        appliance_factory, tmp_path):
    first = appliance_factory(log_dirs=2, settings={"num.partitions": "2"})
    create_topic(first.bootstrap, "mine", 2)
    acked, failed = produce_acked(first.bootstrap, "mine", 500, "m")
    assert failed == []
    time.sleep(0.5)  # let the flush loop settle before the files are compared
    before = files_of(first.log_dirs)
    # another config (so another shm region) whose second log dir is the first's second
    own = tmp_path / "second" / "disk0"
    second = Appliance(tmp_path / "second", log_dirs=2, settings={
        "log.dirs": f"{own},{first.log_dirs[1]}", "shutdown.timeout.ms": "0"})
    started = time.monotonic()
    result = klog("appliance", "run", "--config", str(second.config))
    took_s = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert f"in {first.log_dirs[1]} " in result.stderr and REFUSAL in result.stderr
    assert result.stderr.count(WAITING) == 1, "the wait is logged once, naming the dir"
    assert "Traceback" not in result.stderr
    print(f"refused after {took_s:.1f} s (shutdown.timeout.ms=0: the 10 s margin alone)")
    assert region_name_for(load_config(second.config)).lstrip("/") not in shm_names()
    assert not (own / "meta.properties").exists(), "the refused appliance started nothing"
    assert files_of(first.log_dirs) == before, "the running appliance's files were touched"
    assert sorted(read_everything(first, "mine", 2)) == sorted(acked)
    # the same config: refused at once by the live supervisor's region, as before, not
    # after waiting for the lock (a wait says so in the log, as the refusal above shows)
    again = klog("appliance", "run", "--config", str(first.config))
    assert again.returncode == 1 and "already running" in again.stderr
    assert WAITING not in again.stderr


def test_kill_9_of_the_supervisor_under_load_then_a_start_waits_for_its_workers(
        appliance_factory):
    """The scenario that lost acknowledged bytes: the new appliance started while the old
    workers were still stopping. One old worker is paused (a graceful stop that takes long
    under load) until the new supervisor says it waits for the lock."""
    appliance = appliance_factory(log_dirs=2, settings={"num.partitions": "4"})
    create_topic(appliance.bootstrap, "busy", 4)
    results, errors = {}, Counter()

    def run_producer(name):
        results[name] = produce_acked(appliance.bootstrap, "busy", 4000, name, duration_s=5.0,
                                      errors=errors)

    producers = [threading.Thread(target=run_producer, args=(f"p{i}",)) for i in range(2)]
    for thread in producers:
        thread.start()
    time.sleep(1.5)
    old_workers = list(appliance.pids().values())
    os.kill(old_workers[1], signal.SIGSTOP)
    appliance.kill()
    mark = len(appliance.log_text())
    seen = []

    def resume_once_waited_for():
        """The new supervisor waits for the paused worker's lock: it did nothing yet."""
        deadline = time.monotonic() + 20
        while WAITING not in appliance.log_text()[mark:] and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(appliance.log_text()[mark:])
        os.kill(old_workers[1], signal.SIGCONT)  # it sees its supervisor gone, and stops

    # started from this thread: the appliance's parent-death signal follows the thread that
    # forked it (conftest's _stop_with_parent)
    resuming = threading.Thread(target=resume_once_waited_for)
    resuming.start()
    try:
        appliance.start(timeout_s=90)
    finally:
        resuming.join(30)
    assert WAITING in seen[0] and "worker 0 started" not in seen[0], seen[0]
    assert not any(_alive(pid) for pid in old_workers), "serving beside the old workers"
    for thread in producers:
        thread.join(120)
    acked = [v for name in results for v in results[name][0]]
    assert len(acked) > 1500, errors
    stored = read_everything(appliance, "busy", 4)
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    new_log = appliance.log_text()[mark:]
    assert not re.search(r"after clean shutdown: .*?, [1-9]\d* bytes truncated", new_log), \
        new_log
    assert "died" not in new_log, new_log
    print(f"{len(acked)} acknowledged, {len(stored)} stored, "
          f"{len(stored) - len(set(stored))} duplicates; failed deliveries: {dict(errors)}")


def test_a_crashed_worker_is_restarted_holds_the_locks_and_tools_work_meanwhile(
        appliance_factory):
    appliance = appliance_factory(log_dirs=2, settings={"num.partitions": "2"})
    create_topic(appliance.bootstrap, "again", 2)
    supervisor = appliance.process.pid
    victim = appliance.worker_pid(1)
    for pid in (supervisor, victim):
        assert all(holds_lock_of(pid, d) for d in appliance.log_dirs)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while appliance.pids()[1] in (0, victim) or not appliance._all_serving():
        assert time.monotonic() < deadline, appliance.log_text()
        time.sleep(0.1)
    restarted = appliance.worker_pid(1)
    assert all(holds_lock_of(restarted, d) for d in appliance.log_dirs)
    acked, failed = produce_acked(appliance.bootstrap, "again", 200, "a")
    assert failed == [] and sorted(read_everything(appliance, "again", 2)) == sorted(acked)

    # offline tools while it runs: none takes the log dirs' lock
    segment = next(appliance.log_dirs[0].glob("again-*/*.log"), None) or next(
        appliance.log_dirs[1].glob("again-*/*.log"))
    assert klog("dump-log", str(segment)).returncode == 0
    assert klog("users", "list", "--config", str(appliance.config)).returncode == 0
    assert klog("acls", "list", "--config", str(appliance.config)).returncode == 0
    assert klog("status", "--config", str(appliance.config), "--interval", "0").returncode == 0

    assert appliance.stop() == 0
    for log_dir in appliance.log_dirs:
        assert (log_dir / LOCK_FILE).exists(), "the lock file stays, as Kafka's"
        fd = try_lock(log_dir)
        assert fd is not None, f"{log_dir} still locked after a clean stop"
        os.close(fd)


def test_workers_forked_by_the_fork_server_hold_the_locks_too(appliance_factory):
    """With a thread in the supervisor (the metrics endpoint here, kazoo in a fleet) workers
    come from the fork server: it inherits the locks and passes them on."""
    appliance = appliance_factory(log_dirs=2, settings={"metrics.port": free_port()})
    for pid in (appliance.process.pid, *appliance.pids().values()):
        assert all(holds_lock_of(pid, d) for d in appliance.log_dirs), pid
    assert appliance.stop() == 0
    for log_dir in appliance.log_dirs:
        fd = try_lock(log_dir)
        assert fd is not None, f"{log_dir} still locked after a clean stop"
        os.close(fd)
