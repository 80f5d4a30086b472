"""The small checkpoint files of many partitions (issue 26): a new partition writes none it
does not need (an absent file reads just as the open would write it), and inside
`durable_together()` the replacements share their fsyncs, yet a kill -9 anywhere leaves each
file whole, old or new, and every log opens afterwards with the right state."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from appliance.segments import PartitionLog, durable_together, filesystems
from appliance.segments.layout import STATE_FILE, log_start_on_disk, read_state, replace_durably
from appliance.segments.leader_epochs import CHECKPOINT_FILE
from tests.segments.batches import make_batch

from .conftest import SMALL

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_new_partition_writes_no_state_file_until_it_has_something_to_say(log_dir):
    log = PartitionLog.open(log_dir, SMALL, now_ms=0)
    assert not os.path.exists(os.path.join(log_dir, STATE_FILE))
    assert log_start_on_disk(log_dir) == 0  # what tools read: the first segment's base
    assert log.leader_epochs.entries == []
    assert not os.path.exists(os.path.join(log_dir, CHECKPOINT_FILE))
    log.start_leader_epoch(2)  # an epoch begins: now it must be on disk
    log.append(make_batch(records=3), now_ms=0, leader_epoch=2)
    assert os.path.exists(os.path.join(log_dir, CHECKPOINT_FILE))
    log.close()
    assert read_state(log_dir).clean_shutdown
    reopened = PartitionLog.open(log_dir, SMALL, now_ms=0)
    try:  # a log that was shut down cleanly is marked unclean again while it is open
        assert not read_state(log_dir).clean_shutdown
        assert reopened.leader_epochs.entries == [(2, 0)]
        assert reopened.log_end_offset == 3
    finally:
        reopened.close()


def test_a_moved_log_start_is_kept_when_the_state_is_not_rewritten(log_dir):
    log = PartitionLog.open(log_dir, SMALL, now_ms=0)
    for _ in range(4):
        log.append(make_batch(records=2), now_ms=0)
    log.set_high_watermark(8)
    log.delete_records_before(5, now_ms=0)
    # killed without a close: partition.state says (5, unclean), which the next open keeps
    log.segments.close_all()
    for _ in range(2):
        reopened = PartitionLog.open(log_dir, SMALL, now_ms=0)
        assert reopened.log_start_offset == 5
        assert read_state(log_dir) == (5, False, None)
        assert log_start_on_disk(log_dir) == 5
        reopened.segments.close_all()


def test_replacements_land_together_at_the_end_of_the_scope(tmp_path):
    paths = [str(tmp_path / f"p{i}" / "cp") for i in range(20)]
    for path in paths:
        os.makedirs(os.path.dirname(path))
        replace_durably(path, "old\n")
    with durable_together.durable_together():
        for path in paths:
            replace_durably(path, "new\n")
        replace_durably(paths[0], "newest\n")  # the last text of a path wins
        with durable_together.durable_together():  # nested: joins the outer scope
            replace_durably(paths[1], "inner\n")
        assert all(Path(p).read_text() == "old\n" for p in paths)  # nothing renamed yet
    texts = [Path(p).read_text() for p in paths]
    assert texts == ["newest\n", "inner\n"] + ["new\n"] * 18
    assert not [n for p in paths for n in os.listdir(os.path.dirname(p)) if n.endswith(".tmp")]


def test_a_deleted_or_swept_temporary_file_is_handled(tmp_path):
    kept, deleted = tmp_path / "kept", tmp_path / "deleted"
    kept.mkdir()
    deleted.mkdir()
    with durable_together.durable_together():
        replace_durably(str(kept / "cp"), "a\n")
        replace_durably(str(deleted / "cp"), "b\n")
        os.unlink(kept / "cp.tmp")  # an open in the same scope swept it as a leftover
        for name in os.listdir(deleted):
            os.unlink(deleted / name)
        os.rmdir(deleted)  # the partition was deleted meanwhile
    assert (kept / "cp").read_text() == "a\n"
    assert not deleted.exists()


def test_without_syncfs_each_file_is_fsynced(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystems, "AVAILABLE", False)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with durable_together.durable_together():
        for i in range(3):
            replace_durably(str(tmp_path / f"cp{i}"), f"{i}\n")
    assert len(synced) == 3 + 1  # each file, and their one directory
    assert [(tmp_path / f"cp{i}").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]


CHILD = textwrap.dedent("""
    import os, random, signal, sys
    sys.path.insert(0, {repo!r})
    from appliance.segments import durable_together
    from appliance.segments.layout import replace_durably
    root, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    stop_at = rng.randrange(2 * count + 3)  # a moment among the writes and the renames
    steps = 0
    def step():
        global steps
        if steps == stop_at:
            os.kill(os.getpid(), signal.SIGKILL)
        steps += 1
    real_replace = os.replace
    def replace(a, b):
        step()
        real_replace(a, b)
    os.replace = replace
    with durable_together.durable_together():
        for i in range(count):
            step()
            replace_durably(os.path.join(root, f"p{{i}}", "cp"), f"new {{i}}\\n")
    step()
    step()
""")


@pytest.mark.parametrize("seed", range(6))
def test_a_kill_9_anywhere_leaves_each_file_old_or_new(tmp_path, seed):
    count = 12
    for i in range(count):
        (tmp_path / f"p{i}").mkdir()
        replace_durably(str(tmp_path / f"p{i}" / "cp"), f"old {i}\n")
    child = subprocess.run([sys.executable, "-c", CHILD.format(repo=REPO), str(tmp_path),
                            str(seed), str(count)], capture_output=True, timeout=60)
    assert child.returncode in (0, -signal.SIGKILL), child.stderr.decode()
    texts = [(tmp_path / f"p{i}" / "cp").read_text() for i in range(count)]
    assert all(t in (f"old {i}\n", f"new {i}\n") for i, t in enumerate(texts)), texts
    if child.returncode == 0:
        assert texts == [f"new {i}\n" for i in range(count)]


def test_many_logs_opened_together_reopen_with_their_epochs(tmp_path):
    dirs = [str(tmp_path / f"t-{i}") for i in range(30)]
    rng = random.Random(7)
    epochs = {}
    with durable_together.durable_together():
        logs = [PartitionLog.open(d, SMALL, now_ms=0) for d in dirs]
        for d, log in zip(dirs, logs):
            epochs[d] = rng.randrange(1, 9)
            log.start_leader_epoch(epochs[d])
    for d, log in zip(dirs, logs):
        log.append(make_batch(records=1), now_ms=0, leader_epoch=epochs[d])
        log.segments.close_all()  # no clean close: as after a kill -9
    for d in dirs:
        reopened = PartitionLog.open(d, SMALL, now_ms=0)
        try:
            assert reopened.leader_epochs.entries == [(epochs[d], 0)]
            assert reopened.log_end_offset == 1
        finally:
            reopened.close()


def test_another_threads_writes_are_its_own(tmp_path):
    """The loop's scope does not capture what the cleaner's or a checkpoint thread writes
    meanwhile: theirs land durably at once, as outside any scope."""
    with durable_together.durable_together():
        replace_durably(str(tmp_path / "loop"), "deferred\n")
        other = threading.Thread(target=replace_durably, args=(str(tmp_path / "thread"),
                                                              "at once\n"))
        other.start()
        other.join()
        assert (tmp_path / "thread").read_text() == "at once\n"
        assert not (tmp_path / "loop").exists()
    assert (tmp_path / "loop").read_text() == "deferred\n"
