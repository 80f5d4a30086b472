"""The compression codecs of Kafka record batches: gzip (1), snappy (2), lz4 (3), zstd (4).

This module owns the byte formats of the compressed ``records`` section of a v2 batch, nothing
else: :mod:`klog.protocol.records` decides when to call it. All four codecs come from one
Rust-backed package, cramjam, so there is one native dependency to keep healthy.

Rules, each one about interoperating with a real client:

* **snappy** reads both framings: the xerial ``SnappyOutputStream`` framing (16-byte header
  ``\\x82SNAPPY\\x00`` + int32 version + int32 compat, then blocks of int32 BE length + raw snappy)
  that Java, kafka-python and aiokafka write, and the single raw snappy block that librdkafka
  writes. Like kafka-python (and because redpanda once wrote them little-endian) the version and
  compat fields are not checked. :func:`compress` writes xerial framing with 32 KiB input blocks
  by default, as snappy-java does; ``snappy_xerial=False`` writes one raw block.
* **lz4** writes a standard LZ4 frame laid out as the Java client's: independent blocks of at
  most 64 KiB, no block or content checksum, no content size (descriptor ``60 40 82``); a block
  that does not shrink is stored uncompressed. The frame is assembled here around cramjam's raw
  block codec: cramjam's own frame encoder links blocks (which Java rejects) or adds block
  checksums, and its frame decoder is several times slower than its block decoder. Reading
  accepts any standard frame; checksums are not verified (the batch CRC-32C covers the bytes),
  and a frame with linked blocks or a dictionary id goes to cramjam's frame decoder.
* **zstd** writes one frame at level 3 (the zstd, librdkafka and Java default); reading accepts
  concatenated frames and frames without a content size (streaming encoders omit it).

What can fail: an unknown codec id raises :class:`UnsupportedCodecError`; bytes that do not
decompress raise :class:`CorruptCompressedDataError`; output beyond ``max_output_bytes`` raises
:class:`DecompressedSizeExceededError` without ever allocating more than that bound (plus one
byte). All are :class:`ValueError` subclasses: bad input never escapes as another type.
"""

from __future__ import annotations

import struct

import cramjam

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
_NAMES = {CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
# magic (8 bytes), version int32 = 1, minimum compatible version int32 = 1
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_HEADER_BYTES = len(XERIAL_HEADER)  # 16
XERIAL_BLOCK_BYTES = 32 * 1024  # snappy-java's default input block
_XERIAL_LENGTH = struct.Struct(">i")  # xerial block length prefix

LZ4_MAGIC = 0x184D2204
# magic (LE), FLG 0x60 (version 1, independent blocks, no checksums, no content size),
# BD 0x40 (64 KiB blocks), HC 0x82 = (xxh32(FLG BD) >> 8) & 0xFF
LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
LZ4_BLOCK_BYTES = 64 * 1024
LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_UNCOMPRESSED = 0x80000000  # high bit of a block size: block stored as is
_U32_LE = struct.Struct("<I")

ZSTD_DEFAULT_LEVEL = 3

# The first output buffer tried for gzip/zstd, as a multiple of the compressed size; it grows
# 4x per retry. Typical log data compresses 4-10x.
_FIRST_GUESS_RATIO = 6
_FIRST_GUESS_MIN_BYTES = 64 * 1024
# Phrases of cramjam's errors when the output buffer is full rather than the input bad.
_FULL_BUFFER_PHRASES = ("whole buffer", "buffer is too small", "smaller than required")


class CompressionError(ValueError):
    """Base of this module's errors."""


class UnsupportedCodecError(CompressionError):
    """The codec id is not one of 0-4 (Kafka's UNSUPPORTED_COMPRESSION_TYPE)."""

    def __init__(self, codec: int):
        super().__init__(f"unsupported compression codec {codec!r}; known: 0-4")
        self.codec = codec


class CorruptCompressedDataError(CompressionError):
    """The bytes are not a valid stream of the codec (or are truncated)."""


class DecompressedSizeExceededError(CorruptCompressedDataError):
    """The data decompresses to more than the caller's ``max_output_bytes`` (a likely bomb)."""


def compress(codec: int, data, *, level: int | None = None, snappy_xerial: bool = True) -> bytes:
    """Compress ``data`` (any bytes-like object) with ``codec``; codec 0 returns it unchanged.

    ``level`` is the codec's own level (None: its default; for lz4, 3 and up select the
    high-compression mode). Raises :class:`UnsupportedCodecError` for a codec other than 0-4.
    """
    if codec == CODEC_LZ4:
        return _lz4_compress(data, level)
    if codec == CODEC_SNAPPY:
        if snappy_xerial:
            return _xerial_compress(data)
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, ZSTD_DEFAULT_LEVEL if level is None else level))
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data, level))
    if codec == CODEC_NONE:
        return bytes(data)
    raise UnsupportedCodecError(codec)


def decompress(codec: int, data, *, max_output_bytes: int | None = None) -> bytes:
    """Decompress ``data`` (any bytes-like object) written with ``codec``.

    ``max_output_bytes`` bounds the output: beyond it :class:`DecompressedSizeExceededError` is
    raised, with no buffer larger than the bound (plus one byte) ever allocated. Raises
    :class:`CorruptCompressedDataError` for bytes that do not decompress and
    :class:`UnsupportedCodecError` for a codec other than 0-4.
    """
    if codec == CODEC_LZ4:
        return _lz4_decompress(data, max_output_bytes)
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data, max_output_bytes)
    if codec == CODEC_ZSTD:
        return _stream_decompress(codec, cramjam.zstd, data, max_output_bytes, None)
    if codec == CODEC_GZIP:
        return _stream_decompress(codec, cramjam.gzip, data, max_output_bytes, _gzip_size(data))
    if codec == CODEC_NONE:
        data = bytes(data)
        if max_output_bytes is not None and len(data) > max_output_bytes:
            raise DecompressedSizeExceededError(
                f"{len(data)} bytes exceed the limit of {max_output_bytes}"
            )
        return data
    raise UnsupportedCodecError(codec)


# --- gzip and zstd: cramjam's stream decoders into a buffer we size --------------------------


def _gzip_size(data) -> int | None:
    """The ISIZE trailer of a gzip member: the output size mod 2**32 (a hint, not a promise)."""
    if len(data) < 18:
        return None
    with memoryview(data) as view:
        return _U32_LE.unpack_from(view, len(view) - 4)[0]


def _is_full_buffer(exc: Exception) -> bool:
    return any(phrase in str(exc) for phrase in _FULL_BUFFER_PHRASES)


def _stream_decompress(codec: int, module, data, max_output_bytes: int | None, hint: int | None):
    """Decompress into a buffer sized from ``hint`` or a ratio guess, growing 4x per try.

    Into a buffer of the right size cramjam runs up to 2x faster than into its own growing
    output, and ``decompress_into`` stops as soon as the buffer is full, so memory stays
    bounded by ``max_output_bytes``. A full buffer and bad input raise the same exception type:
    under a bound the message tells them apart at the bound; without one, after two regrowths
    (or at once on any other error) the plain decoder has the last word.
    """
    limit = None if max_output_bytes is None else max_output_bytes + 1
    guess = max(_FIRST_GUESS_MIN_BYTES, len(data) * _FIRST_GUESS_RATIO)
    size = hint if hint is not None and hint <= 16 * guess else guess
    if limit is not None:
        size = min(size, limit)
    regrowths = 0
    while True:
        out = bytearray(size)
        try:
            written = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if limit is not None:
                if size < limit:
                    size = min(limit, max(size * 4, guess))
                    continue
                if _is_full_buffer(exc):
                    raise _too_big(codec, max_output_bytes) from exc
                raise CorruptCompressedDataError(f"{_NAMES[codec]}: {exc}") from exc
            if regrowths < 2 and _is_full_buffer(exc):
                regrowths += 1
                size = max(size * 4, guess)
                continue
            try:
                return bytes(module.decompress(data))
            except cramjam.DecompressionError as final:
                raise CorruptCompressedDataError(f"{_NAMES[codec]}: {final}") from final
        if max_output_bytes is not None and written > max_output_bytes:
            raise _too_big(codec, max_output_bytes)
        with memoryview(out) as view:
            return bytes(view[:written])


def _too_big(codec: int, max_output_bytes: int) -> DecompressedSizeExceededError:
    return DecompressedSizeExceededError(
        f"{_NAMES[codec]} data decompresses to more than {max_output_bytes} bytes"
    )


# --- snappy: xerial framing or one raw block ------------------------------------------------


def _xerial_compress(data) -> bytes:
    parts = [XERIAL_HEADER]
    pack = _XERIAL_LENGTH.pack
    compress_raw = cramjam.snappy.compress_raw
    with memoryview(data) as view:
        # at least one block: kafka-python takes a bare 16-byte header for raw snappy
        for start in range(0, max(len(view), 1), XERIAL_BLOCK_BYTES):
            block = bytes(compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
            parts.append(pack(len(block)))
            parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data, max_output_bytes: int | None) -> bytes:
    with memoryview(data) as view:
        if len(view) >= XERIAL_HEADER_BYTES and view[:8] == XERIAL_MAGIC:
            return _xerial_decompress(view, max_output_bytes)
        return _snappy_block(view, max_output_bytes, 0)


def _snappy_block(block, budget: int | None, position: int) -> bytes:
    """One raw snappy block; its preamble states the output size, checked before allocating."""
    try:
        if budget is not None:
            size = cramjam.snappy.decompress_raw_len(block)
            if size > budget:
                raise DecompressedSizeExceededError(
                    f"snappy block at byte {position} declares {size} bytes, over the "
                    f"{budget} bytes left under the limit"
                )
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise CorruptCompressedDataError(f"snappy block at byte {position}: {exc}") from exc


def _xerial_decompress(view: memoryview, max_output_bytes: int | None) -> bytes:
    parts = []
    budget = max_output_bytes
    pos = XERIAL_HEADER_BYTES
    end = len(view)
    unpack_from = _XERIAL_LENGTH.unpack_from
    while pos < end:
        if end - pos < 4:
            raise CorruptCompressedDataError(
                f"xerial snappy: {end - pos} bytes at byte {pos} are too few for a block length"
            )
        (length,) = unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptCompressedDataError(
                f"xerial snappy: block length {length} at byte {pos - 4} overruns the "
                f"{end - pos} bytes left"
            )
        block = _snappy_block(view[pos : pos + length], budget, pos)
        if budget is not None:
            budget -= len(block)
        parts.append(block)
        pos += length
    return b"".join(parts)


# --- lz4: the frame format around cramjam's block codec -------------------------------------


def _lz4_compress(data, level: int | None) -> bytes:
    if level is not None and level >= 3:
        options = {"mode": "high_compression", "compression": level}
    else:
        options = {}
    parts = [LZ4_FRAME_HEADER]
    pack = _U32_LE.pack
    compress_block = cramjam.lz4.compress_block
    with memoryview(data) as view:
        for start in range(0, len(view), LZ4_BLOCK_BYTES):
            chunk = view[start : start + LZ4_BLOCK_BYTES]
            block = bytes(compress_block(chunk, store_size=False, **options))
            if len(block) < len(chunk):
                parts.append(pack(len(block)))
                parts.append(block)
            else:
                parts.append(pack(len(chunk) | _LZ4_UNCOMPRESSED))
                parts.append(bytes(chunk))
    parts.append(LZ4_END_MARK)
    return b"".join(parts)


def _lz4_decompress(data, max_output_bytes: int | None) -> bytes:
    with memoryview(data) as view:
        parts: list[bytes] = []
        pos = 0
        end = len(view)
        budget = max_output_bytes
        while True:
            try:
                pos, budget = _lz4_frame(view, pos, parts, budget)
            except _BudgetSpent:
                raise _too_big(CODEC_LZ4, max_output_bytes) from None
            if pos is None:  # a frame this reader leaves to cramjam's frame decoder
                return _stream_decompress(CODEC_LZ4, cramjam.lz4, view, max_output_bytes, None)
            if pos >= end:
                return b"".join(parts)


class _BudgetSpent(Exception):
    """The output of an lz4 frame went over the caller's bound."""


def _lz4_corrupt(pos: int, reason: str) -> CorruptCompressedDataError:
    return CorruptCompressedDataError(f"lz4 frame: {reason} at byte {pos}")


def _lz4_frame(view: memoryview, pos: int, parts: list, budget: int | None):
    """Decode the frame at ``pos`` into ``parts``; return the next position and budget left.

    Returns ``(None, budget)`` for a frame with linked blocks or a dictionary id.
    """
    end = len(view)
    if end - pos < 7:
        raise _lz4_corrupt(pos, f"{end - pos} bytes are too few for a frame header")
    (magic,) = _U32_LE.unpack_from(view, pos)
    if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: length, then that many bytes
        (length,) = _U32_LE.unpack_from(view, pos + 4)
        if pos + 8 + length > end:
            raise _lz4_corrupt(pos, f"skippable frame of {length} bytes overruns the data")
        return pos + 8 + length, budget
    if magic != LZ4_MAGIC:
        raise _lz4_corrupt(pos, f"magic {magic:#010x} is not {LZ4_MAGIC:#010x}")
    flg, bd = view[pos + 4], view[pos + 5]
    if flg >> 6 != 1 or flg & 0x02 or bd & 0x8F or not 4 <= bd >> 4 <= 7:
        raise _lz4_corrupt(pos, f"frame descriptor {flg:#04x} {bd:#04x} is not valid")
    if not flg & 0x20 or flg & 0x01:
        return None, budget
    max_block = 1 << (2 * (bd >> 4) + 8)
    block_checksum = 4 if flg & 0x10 else 0
    pos += 7 + (8 if flg & 0x08 else 0)  # magic, FLG, BD, [content size], HC
    scratch = memoryview(bytearray(max_block))
    decompress_into = cramjam.lz4.decompress_block_into
    while True:
        if end - pos < 4:
            raise _lz4_corrupt(pos, "data ends before the end mark")
        (size,) = _U32_LE.unpack_from(view, pos)
        pos += 4
        if size == 0:
            return pos + (4 if flg & 0x04 else 0), budget
        stored = size & _LZ4_UNCOMPRESSED
        size &= ~_LZ4_UNCOMPRESSED
        if size > max_block or pos + size + block_checksum > end:
            raise _lz4_corrupt(pos - 4, f"block of {size} bytes overruns the data or the frame")
        block = view[pos : pos + size]
        if stored:
            out = bytes(block)
        else:
            try:
                written = decompress_into(block, scratch)
            except cramjam.DecompressionError as exc:
                raise _lz4_corrupt(pos, str(exc)) from exc
            out = bytes(scratch[:written])
        if budget is not None:
            budget -= len(out)
            if budget < 0:
                raise _BudgetSpent
        parts.append(out)
        pos += size + block_checksum
