"""Attach: a restarted owner opens on the numbers its killed predecessor published.

A forked child appends and "publishes" ``log.snapshot()`` on a pipe after every append, as the
worker does into the shm region; it is SIGKILLed at seeded random moments or at an armed fault
point (half an append written, an append written but not published, a roll half done). The
parent attaches on the last numbers published: every batch up to them must be served byte for
byte, a torn tail cut, whole batches after them kept, and a cold full scan of the same files
afterwards must find exactly the same log. Numbers that disagree with the files must fall back
to the normal recovery, and say so."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from appliance.segments import AttachPoint, LogConfig, PartitionLog, faults
from klog.protocol import record_batch as rb

from .batches import random_batch, split_batches, with_base_offset
from .conftest import SMALL, Crash, crash
from .kill_harness import appender, run_until_killed

SEED = 20_250_101
ROUNDS = 36
CONFIG = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512, segment_index_bytes=1024,
                   retention_ms=-1)
FAULTS = [None, "segment.torn_write", "segment.after_write", "log.roll.before_seal",
          "log.after_roll"]


def _batch(round_no: int, i: int) -> bytes:
    return random_batch(random.Random(f"{SEED}/{round_no}/{i}"), max_payload=3000)


def _run_round(directory: str, round_no: int, rng: random.Random) -> list[list[int]]:
    fault = FAULTS[round_no % len(FAULTS)]
    countdown, delay_s = rng.randint(0, 20), rng.uniform(0.0, 0.03)
    return run_until_killed(
        appender(lambda: PartitionLog.open(directory, CONFIG, now_ms=round_no),
                 lambda i: _batch(round_no, i), round_no=round_no, fault=fault,
                 countdown=countdown, arm_before_open=False, report_snapshot=True),
        delay_s)


def _every_batch(log) -> dict[int, bytes]:
    """{base offset: bytes} of every stored batch, as served (whole segments at a time), each
    checked whole (CRC) and contiguous with the previous one."""
    out, next_offset = {}, log.log_start_offset
    while next_offset < log.log_end_offset:
        for data in split_batches(log.read(next_offset, 1 << 30).read()):
            header = rb.check_batch(data)
            assert header.base_offset == next_offset
            out[next_offset] = data
            next_offset = header.next_offset
    assert next_offset == log.log_end_offset
    return out


def test_attach_after_sigkill_serves_what_was_published_and_cuts_a_torn_tail(tmp_path):
    directory = str(tmp_path / "attach-0")
    rng = random.Random(SEED)
    published: dict[int, bytes] = {}
    cut = kept_after = rolled = 0
    for round_no in range(ROUNDS):
        lines = _run_round(directory, round_no, rng)
        for offset, r, i, *_ in lines:
            published[offset] = with_base_offset(_batch(r, i), offset)
        if not lines:
            continue  # killed before its first append: nothing new published
        point = AttachPoint(*lines[-1][5:8])  # log end, active base, active bytes
        log = PartitionLog.open(directory, CONFIG, now_ms=0, attach=point)
        report = log.recovery
        assert report.attached and report.attach_refused is None, str(report)
        assert "attached at offset" in str(report)
        assert report.trusted_bytes >= point.active_bytes
        assert log.log_end_offset >= point.log_end_offset
        assert log.recovery_point == log.log_start_offset  # nothing claimed durable yet
        cut += bool(report.bytes_truncated)
        kept_after += log.log_end_offset > point.log_end_offset
        rolled += log.segment_count > 1 and report.segments[-1].base_offset == point.log_end_offset
        stored = _every_batch(log)
        for offset, expected in published.items():
            assert stored.get(offset) == expected, (round_no, offset, str(report))
        for offset in range(max(0, point.log_end_offset - 3), point.log_end_offset):
            assert log.read(offset, 1).read() == published[log.read(offset, 1).first_offset]
        published.update(stored)  # whole batches after the published point were kept
        crash(log)
        cold = PartitionLog.open(directory, CONFIG, now_ms=0, verify="full")
        assert not cold.recovery.truncated, str(cold.recovery)
        assert _every_batch(cold) == stored  # a cold scan agrees with what attach accepted
        crash(cold)  # the next child meets an unclean shutdown
    print(f"{len(published)} batches, {cut} torn tails cut, {kept_after} unpublished appends "
          f"kept, {rolled} rolls in flight in {ROUNDS} kills")
    assert cut > 0 and kept_after > 0


def _fill(log, count, seed=1):
    rng, sent = random.Random(seed), []
    for _ in range(count):
        batch = random_batch(rng)
        sent.append((log.append(batch, now_ms=0).base_offset, batch))
    return sent


def _readable(log, sent):
    for offset, batch in sent:
        assert log.read(offset, 1).read() == with_base_offset(batch, offset)


def _killed(open_log, count=100, seed=1):
    """A multi-segment log left as a SIGKILL leaves it, and the numbers it published."""
    log = open_log()
    sent = _fill(log, count, seed)
    point = log.snapshot().attach_point()
    crash(log)
    return sent, point


def test_attach_trusts_sealed_segments_and_the_active_prefix(open_log, log_dir):
    sent, point = _killed(open_log)
    log = open_log(attach=point)
    report = log.recovery
    assert report.attached and not report.changed
    assert report.segments[-1].trusted_bytes == point.active_bytes
    sealed = report.segments[:-1]
    assert len(sealed) >= 3 and all(s.trusted_bytes and not s.batches_validated for s in sealed)
    assert log.log_end_offset == point.log_end_offset
    _readable(log, sent)
    more = _fill(log, 30, seed=2)  # appends, rolls and index entries carry on as usual
    _readable(log, sent + more)
    log.flush()
    assert log.recovery_point == log.log_end_offset
    log.close()
    again = open_log()
    assert not again.recovery.changed
    _readable(again, sent + more)


def test_a_torn_tail_is_cut_and_index_entries_beyond_it_dropped(open_log, log_dir):
    config = dataclasses.replace(SMALL, segment_bytes=1 << 20, index_interval_bytes=64)
    log = open_log(config)
    sent = _fill(log, 10)
    point = log.snapshot().attach_point()
    many = b"".join(random_batch(random.Random(i), max_payload=200) for i in range(6))
    faults.arm("segment.after_write", Crash())  # written and indexed, not published
    with pytest.raises(Crash):
        log.append(many, now_ms=0)
    in_flight = log.segments.active.index.entries
    crash(log)
    path = os.path.join(log_dir, f"{point.active_base_offset:020d}.log")
    third = point.active_bytes + sum(rb.read_header(b).size for b in _split(many)[:2])
    with open(path, "r+b") as f:  # damage the third in-flight batch
        f.seek(third + 40)
        f.write(b"\xff\xff")
    again = open_log(config, attach=point)
    report = again.recovery
    assert report.attached and report.bytes_truncated > 0
    tail = report.segments[-1]
    assert tail.scanned_from == point.active_bytes and tail.batches_validated == 2
    assert tail.truncated_at == third
    assert again.log_end_offset == point.log_end_offset + sum(
        rb.read_header(b).last_offset_delta + 1 for b in _split(many)[:2])
    index = again.segments.active.index
    assert index.entries < in_flight
    assert all(index.entry_at(n)[1] < third for n in range(index.entries))
    _readable(again, sent)
    again.close()
    assert not open_log(config).recovery.changed  # the indexes left behind are right


def _split(data):
    out, pos = [], 0
    while pos < len(data):
        size = rb.read_header(data, pos).size
        out.append(data[pos : pos + size])
        pos += size
    return out


@pytest.mark.parametrize("fault", ["log.roll.before_seal", "log.after_roll",
                                   "segment.after_write"])
def test_a_roll_in_flight(open_log, log_dir, fault):
    log = open_log()
    sent = _fill(log, 12)
    while True:  # publish after each append until the next one will roll
        point = log.snapshot().attach_point()
        batch = random_batch(random.Random(len(sent)))
        if point.active_bytes + len(batch) > SMALL.segment_bytes:
            break
        sent.append((log.append(batch, now_ms=0).base_offset, batch))
    faults.arm(fault, Crash())
    with pytest.raises(Crash):
        log.append(batch, now_ms=0)
    assert os.path.exists(os.path.join(log_dir, f"{point.log_end_offset:020d}.log"))
    crash(log)
    again = open_log(attach=point)
    report = again.recovery
    assert report.attached, str(report)
    assert report.segments[-1].base_offset == point.log_end_offset
    _readable(again, sent)
    if fault == "segment.after_write":  # the in-flight batch was whole: kept
        _readable(again, [(point.log_end_offset, batch)])
    else:
        assert again.log_end_offset == point.log_end_offset
    sealed = os.path.join(log_dir, f"{point.active_base_offset:020d}.log")
    assert os.path.getsize(sealed) == point.active_bytes  # trimmed on the way


@pytest.mark.parametrize("damage", [
    "active_bytes beyond the file", "active_bytes inside a batch", "log end off by one",
    "active segment missing", "sealed index missing", "unexplained later segment",
    "empty directory",
])
def test_numbers_that_disagree_fall_back_to_recovery(open_log, log_dir, damage):
    sent, point = _killed(open_log)
    active_path = os.path.join(log_dir, f"{point.active_base_offset:020d}")
    if damage == "active_bytes beyond the file":
        os.truncate(active_path + ".log", point.active_bytes)  # as after a clean close
        point = point._replace(active_bytes=point.active_bytes + 4096)
    elif damage == "active_bytes inside a batch":
        point = point._replace(active_bytes=point.active_bytes - 10)
    elif damage == "log end off by one":
        point = point._replace(log_end_offset=point.log_end_offset + 1)
    elif damage == "active segment missing":
        point = point._replace(active_base_offset=point.active_base_offset + 1)
    elif damage == "sealed index missing":
        os.unlink(os.path.join(log_dir, f"{0:020d}.index"))
    elif damage == "unexplained later segment":
        point = point._replace(active_base_offset=0, active_bytes=100, log_end_offset=3)
    else:
        for name in os.listdir(log_dir):
            os.unlink(os.path.join(log_dir, name))
        sent = []
    log = open_log(attach=point)
    report = log.recovery
    assert not report.attached and report.attach_refused, str(report)
    assert report.changed and "attach refused" in str(report)
    if damage == "sealed index missing":
        assert (0, "index") in report.indexes_rebuilt
    _readable(log, sent)
    assert log.log_end_offset == (sent[-1][0] + rb.read_header(sent[-1][1]).last_offset_delta + 1
                                  if sent else 0)


def test_verify_full_ignores_the_attach_point(open_log):
    sent, point = _killed(open_log)
    log = open_log(verify="full", attach=point)
    assert not log.recovery.attached and "not used" in str(log.recovery)
    _readable(log, sent)
