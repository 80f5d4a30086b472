"""A log dir's `.lock` (appliance/log_dir_lock.py) between real processes: exclusive, shared by
forked children through the inherited descriptor, never by exec'd programs; waited for, then
refused naming the dir."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from appliance.log_dir_lock import (
    LOCK_FILE,
    LogDirLockedError,
    lock_log_dirs,
    lock_wait_s,
    try_lock,
)


def locked_elsewhere(log_dir) -> bool:
    """Whether another process finds the dir locked (flock conflicts across open files)."""
    probe = ("import sys; from pathlib import Path; from appliance.log_dir_lock import try_lock;"
             "sys.exit(0 if try_lock(Path(sys.argv[1])) is None else 1)")
    return subprocess.run([sys.executable, "-c", probe, str(log_dir)]).returncode == 0


def test_the_lock_is_exclusive_and_the_file_stays_after_release(tmp_path):
    locks = lock_log_dirs([tmp_path], wait_s=0)
    assert locked_elsewhere(tmp_path)
    locks.close()
    assert not locked_elsewhere(tmp_path)
    assert (tmp_path / LOCK_FILE).exists(), "Kafka keeps the file; only the lock goes"


def test_a_forked_child_holds_the_lock_until_it_exits(tmp_path):
    locks = lock_log_dirs([tmp_path], wait_s=0)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker: it inherited the descriptor, and with it the lock
        os.close(write_fd)
        os.read(read_fd, 1)
        os._exit(0)
    os.close(read_fd)
    try:
        locks.close()  # the supervisor is gone (kill -9): its worker still runs
        assert locked_elsewhere(tmp_path)
    finally:
        os.close(write_fd)  # the worker ends
        os.waitpid(pid, 0)
    assert not locked_elsewhere(tmp_path)


def test_an_execd_program_does_not_inherit_the_descriptor(tmp_path):
    locks = lock_log_dirs([tmp_path], wait_s=0)
    try:
        [fd] = locks.fds()
        assert not os.get_inheritable(fd)
        seen = subprocess.run(["sh", "-c", f"test -e /proc/self/fd/{fd}"], close_fds=False)
        assert seen.returncode != 0, "a subprocess must not hold the log dir's lock"
    finally:
        locks.close()


def test_a_held_lock_is_waited_for_then_refused_naming_the_dir(tmp_path, caplog):
    first, second = tmp_path / "disk0", tmp_path / "disk1"
    first.mkdir()
    second.mkdir()
    holder = try_lock(second)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(LogDirLockedError) as refused:
            lock_log_dirs([first, second], wait_s=0.5, poll_s=0.05)
        assert time.monotonic() - started >= 0.5
    finally:
        os.close(holder)
    assert str(second) in str(refused.value)
    assert "another klog appliance (or its workers)" in str(refused.value)
    waits = [r for r in caplog.records if "waiting up to" in r.getMessage()]
    assert len(waits) == 1 and str(second) in waits[0].getMessage(), "logged once, naming it"
    assert not locked_elsewhere(first), "the locks taken before the refusal are released"


def test_start_up_takes_the_lock_once_the_holder_exits(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path;"
         "from appliance.log_dir_lock import try_lock; assert try_lock(Path(sys.argv[1]));"
         "print('held', flush=True); time.sleep(0.6)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    locks = lock_log_dirs([tmp_path], wait_s=10, poll_s=0.05)
    waited = time.monotonic() - started
    holder.wait()
    locks.close()
    assert 0.3 < waited < 5


def test_the_wait_covers_a_workers_graceful_stop():
    assert lock_wait_s(30_000) == 40.0
    assert lock_wait_s(0) > 0
