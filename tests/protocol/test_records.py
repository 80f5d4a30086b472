"""klog.protocol.records: v2 batches built and decoded, against ourselves and real clients' codecs.

Peers without a broker: kafka-python 3's pure-Python record batch builder and reader, and
aiokafka's Cython ones; librdkafka's raw-snappy and LZ4F framings are rebuilt with the
compressors it uses. All randomness is seeded (hypothesis runs derandomized).
"""

from __future__ import annotations

import mmap
import struct

import cramjam
import lz4.frame
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder as KpMemoryRecordsBuilder

from klog.protocol import records_decode
from klog.protocol.record_batch import (
    HEADER,
    HEADER_BYTES,
    CorruptBatchError,
    check_batch,
    read_header,
    stamp_log_append_time,
)
from klog.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    LOG_APPEND_TIME,
    BatchBuilder,
    Record,
    build_batch,
    control_record,
    control_type,
    decode_batch,
    decode_batches,
    encode_varint,
    first_offset_at_or_after,
)

BASE_TS = 1_750_000_000_000
CODECS = [0, 1, 2, 3, 4]
SETTINGS = settings(
    derandomize=True,
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

small_bytes = st.binary(max_size=40)
values = st.one_of(
    st.none(),
    small_bytes,
    st.binary(min_size=100, max_size=400),
    st.builds(lambda n, b: bytes([b]) * n, st.integers(8000, 40_000), st.integers(0, 255)),
)
headers = st.one_of(
    st.none(),
    st.just([]),
    st.lists(st.tuples(st.text(max_size=12), st.none() | small_bytes), max_size=4),
)
record_tuples = st.lists(
    st.tuples(
        st.integers(BASE_TS - 100_000, BASE_TS + 10**9),  # deltas of every varint size, some < 0
        st.none() | small_bytes | st.binary(min_size=200, max_size=300),
        values,
        headers,
    ),
    min_size=1,
    max_size=40,
)


def expected(records, base_offset=0):
    return [
        Record(base_offset + i, ts, key, value, list(hdrs or []))
        for i, (ts, key, value, hdrs) in enumerate(records)
    ]


def only(buf):
    [(header, records)] = list(decode_batches(buf))
    return header, records


# --- round trips -------------------------------------------------------------------------------


@SETTINGS
@given(
    records=record_tuples,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**40),
    producer=st.sampled_from([(-1, -1, -1), (4000, 3, 17), (2**40, 0, 2**31 - 5)]),
)
def test_build_decode_round_trip(records, codec, base_offset, producer):
    producer_id, producer_epoch, base_sequence = producer
    batch = build_batch(
        records,
        base_offset=base_offset,
        codec=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    check_batch(batch)  # CRC-32C and structure, by the header module
    header, decoded = only(batch)
    assert decoded == expected(records, base_offset)
    assert header.codec == codec and header.records_count == len(records)
    assert header.base_offset == base_offset and header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][0]
    assert header.max_timestamp == max(r[0] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert not header.is_control and not header.log_append_time


@SETTINGS
@given(records=record_tuples, codec=st.sampled_from(CODECS))
def test_batch_builder_writes_the_same_bytes_as_build_batch(records, codec):
    builder = BatchBuilder(
        batch_size=1 << 30, codec=codec, producer_id=9, producer_epoch=1, base_sequence=5
    )
    for ts, key, value, hdrs in records:
        assert builder.append(ts, key, value, hdrs)
    uncompressed = build_batch(records, producer_id=9, producer_epoch=1, base_sequence=5)
    assert builder.size_estimate == len(uncompressed)
    assert builder.build() == build_batch(
        records, codec=codec, producer_id=9, producer_epoch=1, base_sequence=5
    )


@SETTINGS
@given(records=record_tuples, codec=st.sampled_from(CODECS))
def test_kafka_python_reads_our_batches(records, codec):
    batch = build_batch(records, codec=codec, base_offset=7)
    kp_batch = KpMemoryRecords(batch).next_batch()
    assert kp_batch.validate_crc()
    got = [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kp_batch]
    assert got == expected(records, 7)


@SETTINGS
@given(records=record_tuples, codec=st.sampled_from(CODECS))
def test_we_read_kafka_python_batches(records, codec):
    builder = KpBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, (ts, key, value, hdrs) in enumerate(records):
        builder.append(offset, ts, key, value, hdrs or [])
    header, decoded = only(bytes(builder.build()))
    assert decoded == expected(records)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_memory_records_builder_and_many_batches(codec):
    data = bytearray()
    for n in range(4):
        builder = KpMemoryRecordsBuilder(
            magic=2, compression_type=codec, batch_size=1 << 20, offset=n * 100
        )
        for i in range(50):
            builder.append(
                BASE_TS + i,
                b"k%d" % i if i % 2 else None,
                b"v" * (i * 7),
                [("h", b"x")] if i % 5 == 0 else [],
            )
        builder.close()
        data += builder.buffer()
    batches = list(decode_batches(bytes(data)))
    # kafka-python leaves base_offset 0 (the broker's) and counts offset deltas from `offset`
    assert [(h.base_offset, h.last_offset_delta) for h, _ in batches] == [
        (0, 49),
        (0, 149),
        (0, 249),
        (0, 349),
    ]
    assert all(h.codec == codec for h, _ in batches)
    assert batches[2][1][7] == Record(207, BASE_TS + 7, b"k7", b"v" * 49, [])
    assert batches[3][1][5].headers == [("h", b"x")]


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_cython_builder_and_reader(codec):
    records = [
        (BASE_TS + i, None if i % 3 else b"key", b"value-%d" % i, [("a", None)]) for i in range(30)
    ]
    builder = AioBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for offset, (ts, key, value, hdrs) in enumerate(records):
        builder.append(offset, ts, key, value, hdrs)
    assert only(bytes(builder.build()))[1] == expected(records)
    theirs = AioMemoryRecords(build_batch(records, codec=codec)).next_batch()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
        tuple(r) for r in expected(records)
    ]


# --- librdkafka's framings, rebuilt ------------------------------------------------------------


def recompressed(batch: bytes, codec: int, blob: bytes) -> bytes:
    """The same batch with its records section replaced by ``blob`` under ``codec``."""
    h = read_header(batch)
    header = bytearray(
        HEADER.pack(
            h.base_offset,
            HEADER_BYTES - 12 + len(blob),
            h.partition_leader_epoch,
            2,
            0,
            (h.attributes & ~7) | codec,
            h.last_offset_delta,
            h.base_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            h.records_count,
        )
    )
    struct.pack_into(">I", header, 17, crc32c(blob, crc32c(bytes(header[21:]))))
    return bytes(header) + blob


def test_raw_snappy_batch_as_librdkafka_writes_it():
    records = [(BASE_TS + i, b"k", b"librdkafka %d " % i * 20, None) for i in range(200)]
    plain = build_batch(records)
    raw = bytes(cramjam.snappy.compress_raw(plain[HEADER_BYTES:]))
    assert not raw.startswith(b"\x82SNAPPY")
    header, decoded = only(recompressed(plain, 2, raw))
    assert header.codec == 2 and decoded == expected(records)


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": False, "store_size": True},
        {"block_linked": True},
        {"block_checksum": True, "content_checksum": True},
    ],
)
def test_lz4f_frames_of_other_writers(options):
    records = [(BASE_TS, None, b"%d" % i * 300, None) for i in range(400)]
    plain = build_batch(records)
    frame = lz4.frame.compress(plain[HEADER_BYTES:], **options)
    assert only(recompressed(plain, 3, frame))[1] == expected(records)


# --- what the header says ----------------------------------------------------------------------


def test_log_append_time_gives_every_record_the_batch_max_timestamp():
    records = [(BASE_TS + i, None, b"v", None) for i in range(5)]
    batch = build_batch(records, timestamp_type=LOG_APPEND_TIME, now_ms=BASE_TS + 999)
    header, decoded = only(batch)
    assert header.log_append_time and header.max_timestamp == BASE_TS + 999
    assert {r.timestamp for r in decoded} == {BASE_TS + 999}
    assert {r.timestamp for r in KpMemoryRecords(batch).next_batch()} == {BASE_TS + 999}
    stamped = bytearray(build_batch(records, codec=3))  # as the broker stamps one on append
    stamp_log_append_time(stamped, 0, len(stamped), BASE_TS + 5000)
    assert {r.timestamp for r in only(bytes(stamped))[1]} == {BASE_TS + 5000}


def test_control_batches_are_flagged_and_skippable():
    key, value = control_record(CONTROL_COMMIT, coordinator_epoch=3)
    data = (
        build_batch(
            [(BASE_TS, b"a", b"1", None)],
            base_offset=0,
            is_transactional=True,
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
        )
        + build_batch(
            [(BASE_TS, key, value, None)],
            base_offset=1,
            is_control=True,
            is_transactional=True,
            producer_id=5,
            producer_epoch=0,
        )
        + build_batch([(BASE_TS, None, b"2", None)], base_offset=2)
    )
    batches = list(decode_batches(data))
    assert [h.is_control for h, _ in batches] == [False, True, False]
    assert batches[0][0].is_transactional and batches[1][0].is_transactional
    assert control_type(batches[1][1][0]) == CONTROL_COMMIT
    assert control_type(Record(0, 0, control_record(CONTROL_ABORT)[0], None, [])) == 0
    assert [h.base_offset for h, _ in decode_batches(data, skip_control=True)] == [0, 2]
    kp = KpMemoryRecords(data)
    kp.next_batch()
    marker = next(iter(kp.next_batch()))
    assert marker.commit and marker.version == 0
    with pytest.raises(CorruptBatchError):
        control_type(Record(9, 0, b"\x00", None, []))


def test_empty_batch():
    header, decoded = only(build_batch([], base_offset=40))
    assert decoded == [] and header.records_count == 0 and header.base_timestamp == -1
    assert only(build_batch([], now_ms=BASE_TS))[0].max_timestamp == BASE_TS


def test_none_timestamps_take_now_ms_and_never_a_clock():
    records = [(None, None, b"a", None), (BASE_TS + 5, None, b"b", None), (None, None, b"c", None)]
    decoded = only(build_batch(records, now_ms=BASE_TS))[1]
    assert [r.timestamp for r in decoded] == [BASE_TS, BASE_TS + 5, BASE_TS]
    with pytest.raises(ValueError, match="now_ms"):
        build_batch(records)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ((BASE_TS, "str key", b"v", None), "key must be bytes"),
        ((BASE_TS, None, 42, None), "value must be bytes"),
        ((BASE_TS, None, b"v", [("k", "text")]), "header value must be bytes"),
        ((BASE_TS, None, b"v", [(1, b"x")]), "header key must be str"),
        ((BASE_TS, None, b"v", [("only-key",)]), "pair"),
        ((float(BASE_TS), None, b"v", None), "timestamp must be an int"),
        (("soon", None, b"v", None), "timestamp must be an int"),
    ],
)
def test_wrong_types_are_clear_type_errors(record, message):
    with pytest.raises(TypeError, match=message):
        build_batch([(BASE_TS, None, b"first", None), record])
    builder = BatchBuilder()
    builder.append(BASE_TS, None, b"first")
    with pytest.raises(TypeError, match=message):
        builder.append(*record)
    assert builder.records_count == 1


def test_bad_batch_options():
    with pytest.raises(ValueError, match="codec"):
        build_batch([(BASE_TS, None, b"v", None)], codec=5)
    with pytest.raises(ValueError, match="timestamp_type"):
        build_batch([(BASE_TS, None, b"v", None)], timestamp_type=2)


# --- BatchBuilder ------------------------------------------------------------------------------


def test_batch_builder_fills_up_to_batch_size():
    builder = BatchBuilder(batch_size=1000)
    appended = 0
    while builder.append(BASE_TS + appended, b"key", b"x" * 100, None):
        appended += 1
        assert builder.size_estimate <= 1000
    assert appended == len(builder) == builder.records_count
    assert builder.size_estimate + 100 > 1000  # the refused record did not fit
    batch = builder.build()
    assert len(batch) == builder.size_estimate
    assert builder.build() is batch
    with pytest.raises(RuntimeError):
        builder.append(BASE_TS, None, b"late")


def test_batch_builder_always_takes_the_first_record():
    builder = BatchBuilder(batch_size=100)
    assert builder.append(BASE_TS, None, b"x" * 5000)
    assert not builder.append(BASE_TS, None, b"y")
    assert only(builder.build())[1] == [Record(0, BASE_TS, None, b"x" * 5000, [])]


def test_batch_builder_compresses_on_build():
    builder = BatchBuilder(codec=4, batch_size=1 << 20)
    for i in range(1000):
        builder.append(BASE_TS + i, None, b"same old log line %d" % (i % 10))
    batch = builder.build()
    assert len(batch) < builder.size_estimate / 5
    assert len(only(batch)[1]) == 1000


# --- damage ------------------------------------------------------------------------------------


@settings(derandomize=True, max_examples=300, deadline=None)
@given(codec=st.sampled_from(CODECS), index=st.integers(16, 10**6), mask=st.integers(1, 255))
def test_any_flipped_byte_inside_the_crc_range_is_a_typed_error(codec, index, mask):
    batch = bytearray(
        build_batch(
            [(BASE_TS + i, b"k", b"value %d" % i, [("h", b"v")]) for i in range(20)], codec=codec
        )
    )
    batch[index % (len(batch) - 16) + 16] ^= mask  # magic, crc, attributes ... records
    with pytest.raises(CorruptBatchError):
        list(decode_batches(bytes(batch)))


@settings(derandomize=True, max_examples=500, deadline=None)
@given(
    codec=st.sampled_from(CODECS),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3),
)
def test_without_crc_damaged_records_still_only_raise_typed_errors(codec, flips):
    batch = bytearray(
        build_batch(
            [
                (BASE_TS + i * 7, b"k" * i, b"v" * (i * 9), [("h", b"v")] if i % 2 else None)
                for i in range(20)
            ],
            codec=codec,
        )
    )
    for index, mask in flips:
        batch[HEADER_BYTES + index % (len(batch) - HEADER_BYTES)] ^= mask
    try:
        decoded = [r for _, rs in decode_batches(bytes(batch), verify_crc=False) for r in rs]
    except CorruptBatchError:
        return
    assert all(isinstance(r, Record) for r in decoded)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(
    records=record_tuples,
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
)
def test_fast_and_checked_decoders_agree(records, flips):
    section = bytearray(build_batch(records)[HEADER_BYTES:])
    for index, mask in flips:
        section[index % len(section)] ^= mask
    data, count = bytes(section), len(records)
    try:
        checked = records_decode._decode_checked(data, 0, len(data), count, 0, BASE_TS)
    except CorruptBatchError:
        with pytest.raises(CorruptBatchError):
            records_decode.decode_records(data, 0, len(data), count, 0, BASE_TS)
        return
    assert records_decode.decode_records(data, 0, len(data), count, 0, BASE_TS) == checked


def test_corrupt_records_name_the_problem():
    batch = build_batch([(BASE_TS, None, b"abc", None)])
    bad = batch[:-5] + encode_varint(-7) + batch[-4:]  # value length -7
    with pytest.raises(CorruptBatchError, match="value length -7"):
        decode_batch(bad, verify_crc=False)
    short = recompressed(batch, 0, batch[HEADER_BYTES:-1])
    with pytest.raises(CorruptBatchError, match="record 0"):
        decode_batch(short)
    with pytest.raises(CorruptBatchError, match="crc"):
        decode_batch(batch[:-1] + b"\x01")


def test_corrupt_compressed_records_chain_the_codec_error():
    batch = build_batch([(BASE_TS, None, b"abc" * 100, None)], codec=3)
    bad = recompressed(batch, 3, b"\x04\x22\x4d\x18garbage")
    with pytest.raises(CorruptBatchError, match="do not decompress") as info:
        decode_batch(bad)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(CorruptBatchError, match="decompress"):
        decode_batch(
            build_batch([(BASE_TS, None, bytes(100_000), None)], codec=4),
            max_decompressed_bytes=10_000,
        )


def test_a_partial_last_batch_is_ignored_at_every_cut():
    first = build_batch([(BASE_TS, None, b"one", None)], base_offset=0)
    second = build_batch([(BASE_TS, b"k", b"two" * 30, [("h", None)])], base_offset=1, codec=1)
    for cut in range(len(second)):
        batches = list(decode_batches(first + second[:cut]))
        assert [h.base_offset for h, _ in batches] == [0]
    assert len(list(decode_batches(first + second))) == 2


# --- inputs and ListOffsets --------------------------------------------------------------------


@pytest.mark.parametrize("codec", [0, 3])
def test_any_bytes_like_buffer_gives_bytes_values(codec, tmp_path):
    records = [(BASE_TS, b"k", b"v%d" % i, [("h", b"x")]) for i in range(3)]
    data = build_batch(records, codec=codec) * 2
    path = tmp_path / "batches"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for buf in (data, bytearray(data), memoryview(data), mapped):
            decoded = [r for _, rs in decode_batches(buf) for r in rs]
            assert decoded == expected(records) * 2
            assert {type(r.value) for r in decoded} == {bytes}


@SETTINGS
@given(
    stamps=st.lists(st.integers(BASE_TS - 50, BASE_TS + 50), min_size=1, max_size=30),
    target=st.integers(BASE_TS - 60, BASE_TS + 60),
    codec=st.sampled_from([0, 2, 4]),
)
def test_first_offset_at_or_after_matches_a_linear_search(stamps, target, codec):
    prefix = build_batch([(BASE_TS, None, b"earlier", None)], base_offset=0)
    batch = build_batch([(ts, None, b"v", None) for ts in stamps], base_offset=10, codec=codec)
    buf = prefix + batch
    want = next(((10 + i, ts) for i, ts in enumerate(stamps) if ts >= target), None)
    assert first_offset_at_or_after(buf, len(prefix), target) == want


def test_first_offset_at_or_after_log_append_time():
    batch = build_batch(
        [(BASE_TS + i, None, b"v", None) for i in range(5)],
        base_offset=3,
        timestamp_type=LOG_APPEND_TIME,
        now_ms=BASE_TS + 100,
    )
    assert first_offset_at_or_after(batch, 0, BASE_TS + 50) == (3, BASE_TS + 100)
    assert first_offset_at_or_after(batch, 0, BASE_TS + 101) is None
    assert first_offset_at_or_after(build_batch([]), 0, 0) is None


def test_batch_builder_producer_state_is_set_late():
    builder = BatchBuilder()
    builder.append(BASE_TS, None, b"v")
    builder.set_producer_state(77, 2, 40, is_transactional=True)
    header, _ = only(builder.build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 40)
    assert header.is_transactional
    with pytest.raises(RuntimeError):
        builder.set_producer_state(1, 1, 1)
