"""A real full disk: a small tmpfs is mounted, filled, and the log must fail cleanly (ENOSPC as
a StorageError when a segment is preallocated), stay readable, and resume once space is back."""

from __future__ import annotations

import errno
import os
import random
import subprocess

import pytest

from appliance.segments import LogConfig, PartitionLog, StorageError
from klog.protocol import record_batch as rb

from .batches import random_batch, with_base_offset

CONFIG = LogConfig(segment_bytes=256 * 1024, segment_index_bytes=4096, index_interval_bytes=1024,
                   retention_ms=-1)


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "klog-test", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill_disk(path) -> None:
    """Write until ENOSPC, in shrinking blocks so that not even a page is left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = 65536
        while block:
            try:
                os.write(fd, b"\xaa" * block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                block //= 2
    finally:
        os.close(fd)


def test_enospc_is_a_storage_error_and_appends_resume(small_disk):
    directory = str(small_disk / "topic-0")
    log = PartitionLog.open(directory, CONFIG, now_ms=0)
    rng = random.Random(7)
    sent = []

    def append():
        batch = random_batch(rng, max_payload=2000)
        info = log.append(batch, now_ms=0)
        sent.append((info.base_offset, batch))

    for _ in range(30):
        append()
    filler = small_disk / "filler"
    _fill_disk(filler)
    # the active segment was preallocated: appends go on until it must roll
    with pytest.raises(StorageError) as caught:
        for _ in range(1000):
            append()
    error = caught.value
    assert error.disk_full and error.errno == errno.ENOSPC
    assert "ENOSPC" in str(error) and error.path.startswith(directory)
    end = log.log_end_offset
    last_offset, last_batch = sent[-1]
    assert end == last_offset + rb.read_header(last_batch).last_offset_delta + 1
    assert error.operation == "preallocate" and log.segment_count == 1  # failed at the roll
    # consistent and readable while the disk is full; a retry fails the same clean way
    for offset, batch in sent:
        assert log.read(offset, 1).read() == with_base_offset(batch, offset)
    with pytest.raises(StorageError):
        append()
    assert log.log_end_offset == end
    assert not any(name.endswith(".tmp") for name in os.listdir(directory))
    # space comes back: appends resume where they stopped
    filler.unlink()
    for _ in range(10):
        append()
    assert log.log_end_offset > end and log.segment_count == 2
    log.close()
    again = PartitionLog.open(directory, CONFIG, now_ms=0)
    assert not again.recovery.changed
    for offset, batch in sent:
        assert again.read(offset, 1).read() == with_base_offset(batch, offset)
    again.close()


def test_opening_a_new_log_on_a_full_disk_fails_cleanly(small_disk):
    _fill_disk(small_disk / "filler")
    with pytest.raises(StorageError) as caught:
        PartitionLog.open(str(small_disk / "topic-0"), CONFIG, now_ms=0)
    assert caught.value.disk_full
    (small_disk / "filler").unlink()
    log = PartitionLog.open(str(small_disk / "topic-0"), CONFIG, now_ms=0)
    log.append(random_batch(random.Random(1)), now_ms=0)
    log.close()
