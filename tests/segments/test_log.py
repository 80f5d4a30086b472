"""PartitionLog behaviour: append, read, lookups, retention, truncation, reopen, durability."""

from __future__ import annotations

import dataclasses
import os
import random

import pytest

from appliance.segments import (
    EMPTY_SLICE,
    CorruptRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    PartitionLog,
    RecordTooLargeError,
)
from klog.protocol import record_batch as rb

from .batches import make_batch, random_batch, split_batches, with_base_offset
from .conftest import SMALL


def _fill(log, rng, count, *, now_ms=0, max_payload=300):
    sent = []
    for i in range(count):
        batch = random_batch(rng, max_payload=max_payload, timestamp=1000 + 10 * i)
        info = log.append(batch, now_ms=now_ms)
        sent.append((info.base_offset, batch))
    return sent


def _check(log, sent):
    for offset, batch in sent:
        piece = log.read(offset, 1)
        assert piece.read() == with_base_offset(batch, offset)


def test_append_assigns_offsets_and_read_returns_the_same_bytes(open_log):
    log = open_log()
    info = log.append(make_batch(records=3, payload=b"abc"), now_ms=5)
    assert (info.base_offset, info.last_offset, info.record_count, info.batch_count) == (0, 2, 3, 1)
    assert info.log_append_time_ms == -1
    info = log.append(make_batch(records=2) + make_batch(records=1), now_ms=5)
    assert (info.base_offset, info.last_offset, info.batch_count) == (3, 5, 2)
    assert log.log_end_offset == log.high_watermark == 6
    piece = log.read(4, 10**6)
    assert piece.first_offset == 3
    assert [rb.read_header(b).base_offset for b in split_batches(piece.read())] == [3, 5]
    assert log.read(6, 100) == EMPTY_SLICE and not log.read(6, 100)


def test_reads_span_segments_one_at_a_time_whole_batches_at_least_one(open_log):
    log = open_log()
    sent = _fill(log, random.Random(1), 120)
    assert log.segment_count > 3
    _check(log, sent)
    piece = log.read(0, 10**9)
    assert piece.segment_base_offset == 0 and piece.length == os.path.getsize(piece.path)
    for max_bytes in (0, 1, 200, 1000, 2000):
        piece = log.read(sent[5][0], max_bytes)
        batches = split_batches(piece.read())
        assert len(batches) >= 1 and piece.first_offset == sent[5][0]
        assert len(batches) == 1 or piece.length <= max_bytes
        for b in batches:
            rb.check_batch(b)


def test_one_append_of_many_batches_and_one_of_a_large_batch(open_log):
    log = open_log(dataclasses.replace(SMALL, segment_bytes=1 << 20, max_message_bytes=1 << 20))
    many = [make_batch(records=1 + i % 3, payload=bytes([i % 256]) * (i % 7)) for i in range(700)]
    info = log.append(b"".join(many), now_ms=0)  # 1400 iovecs: more than IOV_MAX per call
    assert info.batch_count == 700
    offset = 0
    for batch in many:
        assert log.read(offset, 1).read() == with_base_offset(batch, offset)
        offset += rb.read_header(batch).last_offset_delta + 1
    large = make_batch(records=3, payload=random.Random(1).randbytes(300_000))
    info = log.append(large, now_ms=0)
    assert log.read(info.base_offset, 1).read() == with_base_offset(large, info.base_offset)
    log.close()
    again = PartitionLog.open(log.directory, log.config, now_ms=0)
    assert again.read(info.base_offset, 1).read() == with_base_offset(large, info.base_offset)
    again.close()


def test_offsets_out_of_range(open_log):
    log = open_log()
    _fill(log, random.Random(2), 3)
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 8 is out of range .* \[0, 7\)"):
        log.read(log.log_end_offset + 1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_a_bad_batch_rejects_the_whole_append_before_writing(open_log):
    log = open_log()
    good = make_batch(records=2)
    bad = bytearray(make_batch(records=1, payload=b"xyz"))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="batch 1 .*crc") as caught:
        log.append(good + bytes(bad), now_ms=0)
    assert caught.value.kafka_error_code == 2
    with pytest.raises(CorruptRecordError, match="trailing|remain|overruns"):
        log.append(good + good[:30], now_ms=0)
    with pytest.raises(CorruptRecordError, match="no record batch"):
        log.append(b"", now_ms=0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    log.append(good, now_ms=0)
    assert log.read(0, 100).read() == good


def test_too_large_batches_are_refused(open_log):
    log = open_log(dataclasses.replace(SMALL, max_message_bytes=200))
    too_large = "batch 0 is 261 bytes, above max.message.bytes 200"
    with pytest.raises(RecordTooLargeError, match=too_large):
        log.append(make_batch(payload=bytes(200)), now_ms=0)
    with pytest.raises(RecordTooLargeError, match="segment.bytes"):
        log.append(make_batch(payload=bytes(100)) * 40, now_ms=0)
    assert log.log_end_offset == 0


def test_log_append_time_is_stamped_and_the_crc_recomputed(open_log):
    log = open_log(dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime"))
    info = log.append(make_batch(records=2, base_timestamp=5) * 2, now_ms=777)
    assert info.log_append_time_ms == 777
    for batch in split_batches(log.read(0, 10**6).read()):
        header = rb.check_batch(batch)
        assert header.log_append_time and header.max_timestamp == 777
    assert log.offset_for_timestamp(700) == (0, 777)


def test_leader_epoch_is_patched_when_given(open_log):
    log = open_log()
    log.append(make_batch(), now_ms=0, leader_epoch=7)
    assert rb.check_batch(log.read(0, 100).read()).partition_leader_epoch == 7


def test_offset_for_timestamp_is_batch_granular_and_logarithmic(open_log):
    log = open_log()
    offsets = [
        log.append(make_batch(records=2, payload=bytes(50), base_timestamp=1000 + 10 * i,
                              max_timestamp=1005 + 10 * i), now_ms=0).base_offset
        for i in range(200)
    ]
    assert log.segment_count > 3
    for i in (0, 1, 57, 123, 199):
        assert log.offset_for_timestamp(1000 + 10 * i) == (offsets[i], 1000 + 10 * i)
        assert log.offset_for_timestamp(1003 + 10 * i) == (offsets[i], 1000 + 10 * i)
        after = log.offset_for_timestamp(1006 + 10 * i)
        assert after == (None if i == 199 else (offsets[i] + 2, 1010 + 10 * i))
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(10**9) is None


def test_offset_for_timestamp_refines_to_the_record_with_the_codec(open_log):
    records = pytest.importorskip("klog.protocol.records")
    if not hasattr(records, "first_offset_at_or_after"):
        pytest.skip("klog.protocol.records has no first_offset_at_or_after yet")
    log = open_log()
    batch = records.build_batch([(100 + 10 * i, b"k", b"v", []) for i in range(5)])
    log.append(make_batch(base_timestamp=50), now_ms=0)
    log.append(batch, now_ms=0)
    assert log.offset_for_timestamp(125) == (4, 130)  # record 3 of the second batch


def test_iter_batch_headers(open_log):
    log = open_log()
    sent = _fill(log, random.Random(4), 60)
    seen = [header.base_offset for _, header in log.iter_batch_headers()]
    assert seen == [offset for offset, _ in sent]
    tail = [h.base_offset for _, h in log.iter_batch_headers(start_offset=sent[40][0] + 1)]
    assert tail[0] == sent[40][0] and len(tail) == 20


def test_reopen_keeps_everything(open_log, log_dir):
    log = open_log()
    sent = _fill(log, random.Random(5), 100)
    log.close()
    again = open_log(now_ms=10)
    assert again.recovery.clean_shutdown and not again.recovery.changed
    assert again.log_end_offset == log.log_end_offset
    _check(again, sent)
    sent += _fill(again, random.Random(6), 10)
    _check(again, sent)


def test_retention_deletes_whole_segments_late_and_persists_the_log_start(open_log, log_dir):
    config = dataclasses.replace(SMALL, retention_bytes=8192)
    log = open_log(config)
    sent = _fill(log, random.Random(7), 150)
    old = log.read(0, 100)
    deleted = log.apply_retention(now_ms=100)
    assert deleted >= 2 and log.last_retention.reasons == ("retention.bytes",)
    assert log.log_start_offset > 0 and log.size_bytes <= 8192 + 4096
    assert old.read() == with_base_offset(sent[0][1], 0)  # a handed-out slice still reads
    assert any(name.endswith(".deleted") for name in os.listdir(log_dir))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log.apply_retention(now_ms=100 + config.file_delete_delay_ms)
    assert not any(name.endswith(".deleted") for name in os.listdir(log_dir))
    start = log.log_start_offset
    log.close()
    assert open_log(config).log_start_offset == start


def test_retention_by_time_rolls_an_expired_active_segment(open_log):
    config = dataclasses.replace(SMALL, retention_ms=1000)
    log = open_log(config)
    _fill(log, random.Random(8), 20)  # timestamps 1000..1190
    assert log.apply_retention(now_ms=1500) == 0
    segments = log.segment_count
    assert log.apply_retention(now_ms=5000) == segments
    assert log.log_start_offset == log.log_end_offset and log.size_bytes == 0
    assert log.segment_count == 1


def test_log_start_offset_survives_reopen_inside_a_segment(open_log):
    log = open_log()
    for _ in range(10):
        log.append(make_batch(records=3), now_ms=0)
    log.set_log_start_offset(10)  # inside the batch [9, 11], as DeleteRecords would
    log.close()
    again = open_log()
    assert again.log_start_offset == 10
    assert again.read(10, 1).first_offset == 9
    with pytest.raises(OffsetOutOfRangeError):
        again.read(9, 1)


def test_truncate_to(open_log):
    log = open_log()
    sent = _fill(log, random.Random(10), 100)
    middle = sent[60][0] + 1  # inside batch 60 when it holds several records
    log.truncate_to(middle, now_ms=0)
    kept = [(o, b) for o, b in sent if o + rb.read_header(b).last_offset_delta < middle]
    assert log.log_end_offset == kept[-1][0] + rb.read_header(kept[-1][1]).last_offset_delta + 1
    _check(log, kept)
    more = _fill(log, random.Random(11), 30)
    _check(log, kept + more)
    log.close()
    again = PartitionLog.open(log.directory, SMALL, now_ms=0)
    _check(again, kept + more)
    again.truncate_to(0, now_ms=0)
    assert again.log_end_offset == 0 and again.size_bytes == 0
    again.close()


def test_truncate_below_every_segment_starts_over(open_log):
    log = open_log()
    _fill(log, random.Random(12), 50)
    log.set_log_start_offset(log.segments[1].base_offset + 1)
    log.apply_retention(now_ms=0)
    assert log.segments[0].base_offset > 5 and log.last_retention.reasons == ("log start offset",)
    log.truncate_to(5, now_ms=0)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (5, 5, 1)
    assert log.append(make_batch(), now_ms=0).base_offset == 5


def test_flush_messages_syncs_on_append(open_log, monkeypatch):
    log = open_log(dataclasses.replace(SMALL, flush_messages=3))
    calls = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: calls.append(fd))
    log.append(make_batch(records=2), now_ms=0)
    assert calls == [] and log.recovery_point == 0
    log.append(make_batch(records=1), now_ms=0)
    assert len(calls) == 1 and log.recovery_point == 3


def test_flush_ms(open_log):
    log = open_log(dataclasses.replace(SMALL, flush_ms=100))
    log.append(make_batch(), now_ms=50)
    assert log.recovery_point == 0
    assert not log.flush_if_due(now_ms=60)
    assert log.flush_if_due(now_ms=100) and log.recovery_point == 1


def test_only_a_log_with_a_flush_setting_asks_the_timer(open_log):
    """The worker's flush timer skips logs whose `flushes_on_policy` is false: at Kafka's
    defaults no amount of records or time makes `flush_if_due` true, so the skip loses none."""
    log = open_log(SMALL)
    for i in range(3):
        log.append(make_batch(), now_ms=i)
    assert not log.flushes_on_policy
    assert not log.flush_if_due(now_ms=2**62) and log.recovery_point == 0
    log.reconfigure(dataclasses.replace(SMALL, flush_ms=100))
    assert log.flushes_on_policy
    assert log.flush_if_due(now_ms=2**62) and log.recovery_point == 3
    log.reconfigure(SMALL)
    assert not log.flushes_on_policy


def test_segment_ms_rolls_by_age(open_log):
    log = open_log(dataclasses.replace(SMALL, segment_ms=100), now_ms=0)
    log.append(make_batch(), now_ms=0)
    log.append(make_batch(), now_ms=100)
    assert log.segment_count == 1
    log.append(make_batch(), now_ms=101)
    assert log.segment_count == 2


def test_closed_and_deleted_logs(open_log, log_dir):
    log = open_log()
    log.append(make_batch(), now_ms=0)
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        log.append(make_batch(), now_ms=0)
    again = open_log()
    again.delete()
    assert not os.path.exists(log_dir)


def test_preallocation_and_trimming(open_log, log_dir):
    log = open_log()
    log.append(make_batch(payload=bytes(100)), now_ms=0)
    active = os.path.join(log_dir, f"{0:020d}.log")
    assert os.path.getsize(active) == SMALL.segment_bytes
    assert os.path.getsize(active.replace(".log", ".index")) == SMALL.segment_index_bytes
    log.close()
    assert os.path.getsize(active) == 161
    assert os.path.getsize(active.replace(".log", ".index")) == 0
