"""kill -9 of a process while it cleans a log, at every step of the swap and at seeded
moments of the rewrite: the log reopens valid, every surviving record is an original one at
its own offset, each key's latest record survived, and no .cleaned or .swap is left."""

from __future__ import annotations

import os
import random
import signal

import pytest

from appliance.segments import PartitionLog, faults
from appliance.segments.cleaner import CleanerSettings, clean

from .logs import SMALL, all_records, assert_compacted, write_updates

NOW = 10_000
STEPS = ["cleaner.after_cleaned", "cleaner.after_promote", "cleaner.after_replace_live",
         "cleaner.after_retire"]


def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


def _clean_in_child(directory: str, point: str, countdown: int) -> int:
    """Fork a child that opens the log, arms `point` to kill it, and cleans; returns how
    the child ended (the signal that killed it, or 0 when it finished)."""
    pid = os.fork()
    if pid == 0:
        try:
            faults.arm(point, _kill_self, countdown=countdown)
            plog = PartitionLog.open(directory, SMALL, now_ms=NOW)
            clean(plog, checkpoint=None, now_ms=NOW,
                  settings=CleanerSettings(io_buffer_bytes=1024))
            plog.close()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


def _check_recovered(directory: str, before: list, latest: dict) -> list:
    plog = PartitionLog.open(directory, SMALL, now_ms=NOW)
    try:
        after = all_records(plog)
        assert_compacted(before, after, latest)
        assert plog.log_end_offset == before[-1][0] + 1
        leftovers = [n for n in os.listdir(directory)
                     if n.endswith((".swap", ".cleaned", ".link", ".deleted"))]
        assert not leftovers
        return after
    finally:
        plog.close()


def _written(directory: str, seed: int, *, merge_first: bool = False):
    plog = PartitionLog.open(directory, SMALL, now_ms=0)
    try:
        latest = write_updates(plog, 500, 12, seed=seed)
        if merge_first:  # small cleaned segments, so the next run merges groups of them
            clean(plog, checkpoint=None, now_ms=NOW)
            latest.update(write_updates(plog, 300, 12, seed=seed + 1))
        return all_records(plog), latest
    finally:
        plog.close()


@pytest.mark.parametrize("point", STEPS)
@pytest.mark.parametrize("merge_first", [False, True])
def test_a_kill_at_each_step_of_a_swap_leaves_a_valid_log(tmp_path, point, merge_first):
    directory = str(tmp_path / "t-0")
    before, latest = _written(directory, 7, merge_first=merge_first)
    assert _clean_in_child(directory, point, countdown=1) == signal.SIGKILL
    _check_recovered(directory, before, latest)
    plog = PartitionLog.open(directory, SMALL, now_ms=NOW)  # and it still cleans
    try:
        clean(plog, checkpoint=None, now_ms=NOW)
    finally:
        plog.close()
    _check_recovered(directory, before, latest)


def test_kills_at_seeded_moments_of_cleaning(tmp_path):
    rng = random.Random(2024)
    killed = 0
    for n in range(16):
        directory = str(tmp_path / f"t-{n}")
        before, latest = _written(directory, n, merge_first=rng.random() < 0.5)
        point = rng.choice(STEPS + ["cleaner.batch"] * 4)
        countdown = rng.randrange(60) if point == "cleaner.batch" else rng.randrange(3)
        killed += _clean_in_child(directory, point, countdown) == signal.SIGKILL
        _check_recovered(directory, before, latest)
    assert killed >= 10
