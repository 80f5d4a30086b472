"""Recovery: torn and corrupt tails, corruption in the middle, missing and garbled indexes."""

from __future__ import annotations

import dataclasses
import errno
import os
import random

import pytest

from appliance.segments import PartitionLog, StorageError, faults
from klog.protocol import record_batch as rb

from .batches import random_batch, with_base_offset
from .conftest import SMALL, Crash, crash

NO_INDEX = dataclasses.replace(SMALL, index_interval_bytes=1 << 20)  # the whole segment is "tail"


def _fill(log, count, seed=1):
    rng, sent = random.Random(seed), []
    for _ in range(count):
        batch = random_batch(rng)
        sent.append((log.append(batch, now_ms=0).base_offset, batch))
    return sent


def _segment_file(log_dir, base, suffix=".log"):
    return os.path.join(log_dir, f"{base:020d}{suffix}")


def _batches_of(path):
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + rb.HEADER_BYTES <= len(data):
        header = rb.read_header(data, pos)
        if header.magic != 2:
            break
        out.append((pos, header))
        pos += header.size
    return out


def _flip(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))


def _readable(log, sent):
    for offset, batch in sent:
        assert log.read(offset, 1).read() == with_base_offset(batch, offset)


def test_unclean_reopen_of_a_zero_filled_tail_truncates_nothing(open_log):
    log = open_log()
    sent = _fill(log, 30)
    crash(log)
    again = open_log()
    report = again.recovery
    assert not report.clean_shutdown and not report.changed and report.bytes_truncated == 0
    assert again.log_end_offset == log.log_end_offset
    _readable(again, sent)


def test_a_torn_append_is_cut_and_reported(open_log):
    log = open_log()
    sent = _fill(log, 10)
    faults.arm("segment.torn_write", Crash())
    with pytest.raises(Crash):
        log.append(random_batch(random.Random(99), max_payload=2000), now_ms=0)
    crash(log)
    again = open_log()
    report = again.recovery
    assert report.bytes_truncated > 0 and report.truncated
    assert report.segments[-1].truncated_from_offset == log.log_end_offset
    assert "truncated" in str(report) and "bytes at byte" in str(report)
    assert again.log_end_offset == log.log_end_offset
    _readable(again, sent)
    _readable(again, sent + _fill(again, 5, seed=2))


@pytest.mark.parametrize("where", ["last batch", "middle of the tail"])
def test_flipped_bytes_in_the_tail_truncate_at_the_first_bad_batch(open_log, log_dir, where):
    log = open_log(NO_INDEX)
    sent = _fill(log, 12)
    assert log.segment_count == 1
    crash(log)
    batches = _batches_of(_segment_file(log_dir, 0))
    k = len(batches) - 1 if where == "last batch" else len(batches) // 2
    position, header = batches[k]
    _flip(_segment_file(log_dir, 0), position + 30)  # base_timestamp: inside the CRC range
    again = open_log(NO_INDEX)
    seg = again.recovery.segments[-1]
    assert again.log_end_offset == header.base_offset == seg.truncated_from_offset
    assert seg.truncated_at == position and "crc" in seg.problem
    assert seg.offsets_truncated == sum(h.last_offset_delta + 1 for _, h in batches[k:])
    _readable(again, [(o, b) for o, b in sent if o < header.base_offset])
    assert again.append(random_batch(random.Random(3)), now_ms=0).base_offset == header.base_offset


def test_corruption_in_a_middle_segment_truncates_there_and_drops_later_segments(open_log, log_dir):
    log = open_log()
    sent = _fill(log, 100)
    assert log.segment_count >= 4
    second = log.segments[1].base_offset
    log.close()
    batches = _batches_of(_segment_file(log_dir, second))
    position, header = batches[3]
    _flip(_segment_file(log_dir, second), position + 70)
    # after a clean shutdown a sealed segment is trusted; the operator asks for a full check
    again = open_log(verify="full")
    report = again.recovery
    assert report.corrupt_in_middle and report.deleted_segments
    assert again.log_end_offset == header.base_offset and again.segment_count == 2
    assert f"segment {second}: truncated" in str(report)
    _readable(again, [(o, b) for o, b in sent if o < header.base_offset])
    assert not os.path.exists(_segment_file(log_dir, log.segments[-1].base_offset))


def test_unclean_shutdown_checks_every_segment_tail(open_log, log_dir):
    log = open_log()
    _fill(log, 100)
    first_end = log.segments[0].next_offset
    crash(log)
    batches = _batches_of(_segment_file(log_dir, 0))
    _flip(_segment_file(log_dir, 0), batches[-1][0] + 65)  # last batch of the first segment
    again = open_log()
    assert again.recovery.corrupt_in_middle
    assert again.log_end_offset == first_end - (batches[-1][1].last_offset_delta + 1)
    assert again.segment_count == 1


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["deleted", "garbled", "truncated mid-entry"])
def test_damaged_indexes_are_rebuilt(open_log, log_dir, suffix, damage):
    log = open_log()
    sent = _fill(log, 100)
    log.close()
    path = _segment_file(log_dir, 0, suffix)
    if damage == "deleted":
        os.unlink(path)
    elif damage == "garbled":
        with open(path, "r+b") as f:
            f.seek(12)
            f.write(random.Random(4).randbytes(24))
    else:
        os.truncate(path, os.path.getsize(path) - 3)
    again = open_log()
    assert (0, suffix[1:]) in again.recovery.indexes_rebuilt
    assert "rebuilt" in str(again.recovery) and suffix[1:] in str(again.recovery)
    _readable(again, sent)
    assert again.offset_for_timestamp(0) == (0, rb.read_header(sent[0][1]).base_timestamp)
    again.close()
    third = open_log()
    assert not third.recovery.changed  # the rebuilt index is good
    _readable(third, sent)


def test_a_wrong_index_entry_is_caught_at_lookup_and_the_index_rebuilt(open_log, log_dir, caplog):
    log = open_log()
    sent = _fill(log, 100)
    log.close()
    path = _segment_file(log_dir, 0, ".index")
    entries = os.path.getsize(path) // 8
    assert entries >= 3
    with open(path, "r+b") as f:  # still monotonic, but pointing 1 byte into the batch
        f.seek(8 * (entries - 2) + 4)
        position = int.from_bytes(f.read(4), "big")
        f.seek(8 * (entries - 2) + 4)
        f.write((position + 1).to_bytes(4, "big"))
    again = open_log()
    assert not again.recovery.changed  # clean shutdown: not noticed at open
    _readable(again, sent)
    assert "points at" in caplog.text


def test_index_entries_past_the_end_are_dropped(open_log, log_dir):
    log = open_log()
    sent = _fill(log, 20)
    crash(log)
    batches = _batches_of(_segment_file(log_dir, log.segments[-1].base_offset))
    # power loss: the index reached the disk but the last batches of the log did not
    cut = batches[len(batches) // 2][0]
    path = _segment_file(log_dir, log.segments[-1].base_offset)
    with open(path, "r+b") as f:
        f.seek(cut)
        f.write(bytes(os.path.getsize(path) - cut))
    again = open_log()
    assert again.log_end_offset == batches[len(batches) // 2][1].base_offset
    _readable(again, [(o, b) for o, b in sent if o < again.log_end_offset])


def test_crash_between_creating_a_segment_and_trimming_the_old_one(open_log, log_dir):
    log = open_log()
    sent = _fill(log, 15)
    faults.arm("log.roll.before_seal", Crash())
    with pytest.raises(Crash):
        _fill(log, 30, seed=5)
    crash(log)
    assert os.path.getsize(_segment_file(log_dir, 0)) == SMALL.segment_bytes  # untrimmed
    again = open_log()
    assert not again.recovery.corrupt_in_middle and again.recovery.bytes_truncated == 0
    assert again.log_end_offset >= sent[-1][0] + 1
    _readable(again, sent)


def test_an_io_error_mid_write_leaves_the_log_as_it_was(open_log):
    log = open_log()
    sent = _fill(log, 5)
    end = log.log_end_offset
    faults.arm("segment.torn_write", OSError(errno.EIO, "injected"))
    with pytest.raises(StorageError, match=r"append to .*\.log: \[Errno 5\] EIO") as caught:
        log.append(random_batch(random.Random(5)), now_ms=0)
    assert caught.value.errno == errno.EIO and caught.value.path.endswith(".log")
    assert log.log_end_offset == end
    _readable(log, sent)
    more = _fill(log, 3, seed=6)
    _readable(log, sent + more)
    log.close()
    again = PartitionLog.open(log.directory, SMALL, now_ms=0)
    assert not again.recovery.changed
    _readable(again, sent + more)
    again.close()
