"""klog.protocol.compression: round trips, the framings real clients write, typed errors, bombs.

The independent encoders and decoders are the ones kafka-python uses (python-lz4, zstandard,
stdlib gzip, its own xerial framing) plus snappy-java's layout as documented. All seeded.
"""

from __future__ import annotations

import gzip
import random
import struct
import subprocess
import sys
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from klog.protocol.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    LZ4_FRAME_HEADER,
    XERIAL_BLOCK_BYTES,
    XERIAL_HEADER,
    CompressionError,
    CorruptCompressedDataError,
    DecompressedSizeExceededError,
    UnsupportedCodecError,
    compress,
    decompress,
)

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
COMPRESSED = CODECS[1:]
SETTINGS = settings(derandomize=True, max_examples=60, deadline=None)


def sample(size: int, seed: int = 0) -> bytes:
    """Log-like bytes: compressible, but not trivially."""
    rnd = random.Random(seed)
    words = [rnd.randbytes(rnd.randrange(2, 9)).hex().encode() for _ in range(200)]
    out = bytearray()
    while len(out) < size:
        out += rnd.choice(words) + b" "
    return bytes(out[:size])


payloads = st.one_of(
    st.binary(max_size=3000),
    st.builds(sample, st.integers(0, 300_000), st.integers(0, 5)),
    st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 200_000), st.integers(0, 255)),
)


@SETTINGS
@given(codec=st.sampled_from(CODECS), data=payloads)
def test_round_trip(codec, data):
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data
    assert decompress(codec, compressed, max_output_bytes=len(data)) == data
    assert decompress(codec, memoryview(compressed)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_accepts_any_bytes_like_input(codec):
    data = sample(100_000)
    for source in (bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert decompress(codec, compress(codec, source)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("level", [1, 3, 9])
def test_levels(codec, level):
    data = sample(150_000, seed=level)
    assert decompress(codec, compress(codec, data, level=level)) == data


# --- snappy ------------------------------------------------------------------------------------


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = sample(100_000)
    out = compress(CODEC_SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) == XERIAL_HEADER
    pos, chunks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(c) for c in chunks] == [XERIAL_BLOCK_BYTES] * 3 + [100_000 - 3 * XERIAL_BLOCK_BYTES]
    assert b"".join(chunks) == data


@pytest.mark.parametrize("data", [b"", b"x", sample(70_000)])
def test_snappy_interop_with_kafka_python(data):
    assert kafka_codec.snappy_decode(compress(CODEC_SNAPPY, data)) == data
    assert kafka_codec.snappy_decode(compress(CODEC_SNAPPY, data, snappy_xerial=False)) == data
    assert decompress(CODEC_SNAPPY, kafka_codec.snappy_encode(data)) == data
    raw = kafka_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(CODEC_SNAPPY, raw) == data


def test_snappy_reads_one_raw_block_as_librdkafka_writes():
    data = sample(200_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert not raw.startswith(b"\x82SNAPPY")
    assert decompress(CODEC_SNAPPY, raw) == data
    assert compress(CODEC_SNAPPY, data, snappy_xerial=False) == raw


def test_snappy_ignores_xerial_version_fields_like_kafka_python():
    data = sample(10_000)
    framed = compress(CODEC_SNAPPY, data)
    little_endian = framed[:8] + struct.pack("<ii", 1, 1) + framed[16:]  # as redpanda once wrote
    assert decompress(CODEC_SNAPPY, little_endian) == data


def test_snappy_xerial_bad_block_length_is_corrupt():
    framed = bytearray(compress(CODEC_SNAPPY, sample(10_000)))
    struct.pack_into(">i", framed, 16, len(framed))  # first block claims more than there is
    with pytest.raises(CorruptCompressedDataError, match="overruns"):
        decompress(CODEC_SNAPPY, bytes(framed))
    with pytest.raises(CorruptCompressedDataError, match="too few"):
        decompress(CODEC_SNAPPY, XERIAL_HEADER + b"\x00\x00")


# --- lz4 ---------------------------------------------------------------------------------------


def test_lz4_frame_is_laid_out_as_the_java_client_writes_it():
    data = sample(200_000) + random.Random(1).randbytes(70_000)  # the tail will not shrink
    out = compress(CODEC_LZ4, data)
    assert out.startswith(LZ4_FRAME_HEADER) and out.endswith(b"\x00\x00\x00\x00")
    info = lz4.frame.get_frame_info(out)
    assert info["block_linked"] is False  # Java refuses dependent blocks
    assert info["block_size"] == 64 * 1024
    assert not info["block_checksum"] and not info["content_checksum"]
    assert info["content_size"] == 0
    assert lz4.frame.decompress(out) == data


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": False},  # kafka-python
        {"block_linked": True},  # plain lz4 defaults: read through cramjam's frame decoder
        {"block_linked": False, "block_checksum": True, "content_checksum": True},
        {"block_linked": False, "store_size": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"block_linked": False, "compression_level": 9},
    ],
)
@pytest.mark.parametrize("data", [b"", sample(300_000), random.Random(2).randbytes(100_000)])
def test_lz4_reads_other_encoders_frames(options, data):
    frame = lz4.frame.compress(data, **options)
    assert decompress(CODEC_LZ4, frame) == data
    assert decompress(CODEC_LZ4, frame, max_output_bytes=len(data)) == data
    assert decompress(CODEC_LZ4, kafka_codec.lz4_encode(data)) == data
    assert kafka_codec.lz4_decode(compress(CODEC_LZ4, data)) == data


def test_lz4_concatenated_and_skippable_frames():
    a, b = sample(1000, 1), sample(2000, 2)
    skippable = struct.pack("<II", 0x184D2A5F, 3) + b"abc"
    joined = compress(CODEC_LZ4, a) + skippable + compress(CODEC_LZ4, b)
    assert decompress(CODEC_LZ4, joined) == a + b


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda f: b"\x00" + f[1:], "magic"),
        (lambda f: f[:4] + b"\xe0" + f[5:], "descriptor"),
        (lambda f: f[:5], "too few"),
        (lambda f: f[:-4], "end mark"),
        (lambda f: f[:7] + struct.pack("<I", 70_000) + f[11:], "overruns"),
    ],
)
def test_lz4_bad_frames_are_corrupt(mangle, reason):
    frame = compress(CODEC_LZ4, sample(100_000))
    with pytest.raises(CorruptCompressedDataError, match=reason):
        decompress(CODEC_LZ4, mangle(frame))


# --- gzip and zstd -----------------------------------------------------------------------------


def test_gzip_interop_and_multiple_members():
    data = sample(100_000)
    assert gzip.decompress(compress(CODEC_GZIP, data)) == data
    assert decompress(CODEC_GZIP, kafka_codec.gzip_encode(data)) == data
    two = gzip.compress(data[:500]) + gzip.compress(data[500:])
    assert decompress(CODEC_GZIP, two) == data


def test_gzip_with_a_lying_size_trailer_still_decompresses():
    data = sample(300_000)
    member = bytearray(gzip.compress(data))
    struct.pack_into("<I", member, len(member) - 4, 10)  # ISIZE is only a hint to us
    with pytest.raises(CorruptCompressedDataError):  # the trailer is checked by the decoder
        decompress(CODEC_GZIP, bytes(member))
    member = gzip.compress(data[:100]) + gzip.compress(data[100:])  # first member's ISIZE: 100
    assert decompress(CODEC_GZIP, member) == data


def test_zstd_interop_streamed_frames_and_concatenation():
    data = sample(400_000)
    assert zstandard.ZstdDecompressor().decompress(compress(CODEC_ZSTD, data)) == data
    assert kafka_codec.zstd_decode(compress(CODEC_ZSTD, data)) == data
    assert decompress(CODEC_ZSTD, kafka_codec.zstd_encode(data)) == data
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)  # as Java
    assert decompress(CODEC_ZSTD, streamed) == data
    two = compress(CODEC_ZSTD, data[:10]) + compress(CODEC_ZSTD, data[10:])
    assert decompress(CODEC_ZSTD, two) == data


def test_highly_compressible_data_needs_several_buffer_growths():
    data = bytes(20_000_000)  # compresses ~1000x, far past the first buffer guess
    for codec in (CODEC_GZIP, CODEC_ZSTD):
        assert decompress(codec, compress(codec, data)) == data


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [-1, 5, 7, 8, 99])
def test_unknown_codec_is_a_typed_error(codec):
    with pytest.raises(UnsupportedCodecError, match=str(codec)) as info:
        compress(codec, b"data")
    assert isinstance(info.value, ValueError) and info.value.codec == codec
    with pytest.raises(UnsupportedCodecError):
        decompress(codec, b"data")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_and_garbage_input_is_corrupt(codec):
    frame = compress(codec, sample(100_000))
    for bad in (frame[: len(frame) // 2], frame[:3], b"\x07" * 40, b""):
        if codec == CODEC_SNAPPY and bad == b"":
            continue  # one raw snappy block of nothing would need a length byte; b"" fails too
        with pytest.raises(CorruptCompressedDataError):
            decompress(codec, bad)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6),
    limit=st.none() | st.integers(0, 200_000),
)
def test_damaged_input_raises_only_typed_errors(codec, flips, cut, limit):
    frame = bytearray(compress(codec, sample(50_000, seed=codec)))
    for index, mask in flips:
        frame[index % len(frame)] ^= mask
    damaged = bytes(frame[: max(1, cut % (len(frame) + 1))])
    try:
        out = decompress(codec, damaged, max_output_bytes=limit)
    except CompressionError:
        return
    assert limit is None or len(out) <= limit


# --- decompression bombs -----------------------------------------------------------------------


def _gzip_bomb(size: int) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join(deflate.compress(chunk) for _ in range(size >> 20)) + deflate.flush()


def _lz4_bomb(size: int) -> bytes:
    block = bytes(cramjam.lz4.compress_block(bytes(65536), store_size=False))
    body = (struct.pack("<I", len(block)) + block) * (size // 65536)
    return LZ4_FRAME_HEADER + body + b"\x00\x00\x00\x00"


def _xerial_bomb(size: int) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(bytes(XERIAL_BLOCK_BYTES)))
    return XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (size // XERIAL_BLOCK_BYTES)


def _zstd_bomb(size: int) -> bytes:
    compressor = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


BOMBS = {
    CODEC_GZIP: _gzip_bomb,
    CODEC_SNAPPY: _xerial_bomb,
    CODEC_LZ4: _lz4_bomb,
    CODEC_ZSTD: _zstd_bomb,
}


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bomb_is_refused_at_the_limit(codec):
    bomb = BOMBS[codec](64 << 20)
    with pytest.raises(DecompressedSizeExceededError, match="1048576|limit"):
        decompress(codec, bomb, max_output_bytes=1 << 20)
    assert isinstance(DecompressedSizeExceededError("x"), CorruptCompressedDataError)


def test_raw_snappy_bomb_is_refused_from_its_preamble():
    raw = bytes(cramjam.snappy.compress_raw(bytes(8 << 20)))
    with pytest.raises(DecompressedSizeExceededError, match="declares 8388608"):
        decompress(CODEC_SNAPPY, raw, max_output_bytes=1 << 20)


def test_none_codec_respects_the_limit_too():
    with pytest.raises(DecompressedSizeExceededError):
        decompress(CODEC_NONE, b"12345", max_output_bytes=4)


BOMB_MEMORY_SCRIPT = """
import resource, sys
sys.path.insert(0, {tests!r})
from test_compression import BOMBS
from klog.protocol.compression import DecompressedSizeExceededError, decompress
codec = int(sys.argv[1])
bomb = BOMBS[codec](1 << 30)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decompress(codec, bomb, max_output_bytes=4 << 20)
except DecompressedSizeExceededError:
    pass
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("codec", [CODEC_LZ4, CODEC_ZSTD, CODEC_SNAPPY])
def test_bomb_never_allocates_its_output(codec):
    """A 1 GiB bomb under a 4 MiB limit: the peak RSS of a fresh process grows by < 64 MiB."""
    script = BOMB_MEMORY_SCRIPT.format(tests=str(__import__("pathlib").Path(__file__).parent))
    run = subprocess.run(
        [sys.executable, "-c", script, str(codec)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.strip()) < 64, f"peak RSS grew by {run.stdout.strip()} MiB"
