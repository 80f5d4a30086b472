"""Kafka's primitive wire types as pure functions.

Every reader is ``read_x(buf, pos) -> (value, new_pos)`` over any buffer that supports the
buffer protocol and integer indexing (``bytes``, ``bytearray``, a byte ``memoryview``); every
writer is ``write_x(out, value)`` appending to a ``bytearray``. Big-endian throughout, as Kafka.

Rules that make these safe on hostile input:

- A reader never reads past ``len(buf)``: a short buffer raises :class:`DecodeError`, never
  ``struct.error`` or ``IndexError``.
- A length or count is checked against the bytes that remain *before* anything is allocated, so a
  malicious count cannot make us build a list bigger than the frame could describe.
- A null where the field is not nullable is an error, as in Kafka's own generated code.

"Compact" types are the KIP-482 flexible encodings: lengths as unsigned varints of ``n + 1``
(0 meaning null). Varints and varlongs are zig-zag signed (as in record batches); unsigned varints
are plain LEB128.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from klog.protocol.exceptions import DecodeError, EncodeError

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")
UUID_BYTES = 16
ZERO_UUID = uuid.UUID(int=0)

NULL_INT16 = INT16.pack(-1)
NULL_INT32 = INT32.pack(-1)


def _fixed_reader(st: struct.Struct, kind: str) -> Reader:
    size, unpack_from = st.size, st.unpack_from

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise DecodeError(f"{kind} at {pos} runs past the end ({len(buf)} bytes)") from None

    read.__name__ = f"read_{kind}"
    return read


def _fixed_writer(st: struct.Struct, kind: str) -> Writer:
    pack = st.pack

    def write(out: bytearray, value: Any) -> None:
        try:
            out += pack(value)
        except struct.error as exc:
            raise EncodeError(f"{kind}: cannot encode {value!r}: {exc}") from None

    write.__name__ = f"write_{kind}"
    return write


read_int8, write_int8 = _fixed_reader(INT8, "int8"), _fixed_writer(INT8, "int8")
read_int16, write_int16 = _fixed_reader(INT16, "int16"), _fixed_writer(INT16, "int16")
read_int32, write_int32 = _fixed_reader(INT32, "int32"), _fixed_writer(INT32, "int32")
read_int64, write_int64 = _fixed_reader(INT64, "int64"), _fixed_writer(INT64, "int64")
read_uint16, write_uint16 = _fixed_reader(UINT16, "uint16"), _fixed_writer(UINT16, "uint16")
read_uint32, write_uint32 = _fixed_reader(UINT32, "uint32"), _fixed_writer(UINT32, "uint32")
read_float64, write_float64 = _fixed_reader(FLOAT64, "float64"), _fixed_writer(FLOAT64, "float64")
read_bool, write_bool = _fixed_reader(BOOL, "bool"), _fixed_writer(BOOL, "bool")


def read_uuid(buf: Any, pos: int) -> tuple[uuid.UUID, int]:
    end = _end(buf, pos, UUID_BYTES, "uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


# -- varints -------------------------------------------------------------------------------------


def read_unsigned_varint(buf: Any, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 int of at most 5 bytes (Kafka's 32-bit unsigned varint)."""
    return _read_leb128(buf, pos, 35)


def read_varint(buf: Any, pos: int) -> tuple[int, int]:
    """A zig-zag signed 32-bit varint."""
    n, pos = _read_leb128(buf, pos, 35)
    return (n >> 1) ^ -(n & 1), pos


def read_varlong(buf: Any, pos: int) -> tuple[int, int]:
    """A zig-zag signed 64-bit varint."""
    n, pos = _read_leb128(buf, pos, 70)
    return (n >> 1) ^ -(n & 1), pos


def _read_leb128(buf: Any, pos: int, max_bits: int) -> tuple[int, int]:
    end = len(buf)
    if pos < end and buf[pos] < 0x80:  # fast path: one byte
        return buf[pos], pos + 1
    result = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= max_bits:
            raise DecodeError(f"varint at {pos - shift // 7} is longer than {max_bits // 7} bytes")
    raise DecodeError(f"varint runs past the end ({end} bytes)")


def write_unsigned_varint(out: bytearray, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint out of range: {value}")
    _write_leb128(out, value)


def write_varint(out: bytearray, value: int) -> None:
    if not -(2**31) <= value < 2**31:
        raise EncodeError(f"varint out of range: {value}")
    _write_leb128(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    if not -(2**63) <= value < 2**63:
        raise EncodeError(f"varlong out of range: {value}")
    _write_leb128(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def _write_leb128(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


# -- lengths, strings, bytes ---------------------------------------------------------------------


def _end(buf: Any, pos: int, length: int, kind: str) -> int:
    end = pos + length
    if end > len(buf):
        raise DecodeError(f"{kind} of {length} bytes at {pos} runs past the end ({len(buf)} bytes)")
    return end


def _classic_length(buf: Any, pos: int, wide: bool, kind: str) -> tuple[int, int]:
    """A length prefix (int16 for strings, int32 for bytes); -1 is null, other negatives bad."""
    n, pos = read_int32(buf, pos) if wide else read_int16(buf, pos)
    if n < -1:
        raise DecodeError(f"{kind} has negative length {n}")
    return n, pos


def _compact_length(buf: Any, pos: int, kind: str) -> tuple[int, int]:
    n, pos = read_unsigned_varint(buf, pos)
    return n - 1, pos


def _decode_str(buf: Any, pos: int, end: int) -> str:
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string at {pos} is not UTF-8: {exc}") from None


def read_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    n, pos = _classic_length(buf, pos, False, "string")
    if n < 0:
        return None, pos
    end = _end(buf, pos, n, "string")
    return _decode_str(buf, pos, end), end



def read_compact_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    n, pos = _compact_length(buf, pos, "compact string")
    if n < 0:
        return None, pos
    end = _end(buf, pos, n, "compact string")
    return _decode_str(buf, pos, end), end



def read_nullable_bytes_view(buf: Any, pos: int) -> tuple[Any, int]:
    """Bytes as a zero-copy slice of ``buf`` (a memoryview when ``buf`` is one), or None."""
    n, pos = _classic_length(buf, pos, True, "bytes")
    if n < 0:
        return None, pos
    end = _end(buf, pos, n, "bytes")
    return buf[pos:end], end


def read_compact_nullable_bytes_view(buf: Any, pos: int) -> tuple[Any, int]:
    n, pos = _compact_length(buf, pos, "compact bytes")
    if n < 0:
        return None, pos
    end = _end(buf, pos, n, "compact bytes")
    return buf[pos:end], end


def read_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    """Bytes copied out of the buffer: for values kept after the request is gone."""
    view, pos = read_nullable_bytes_view(buf, pos)
    return (None if view is None else bytes(view)), pos



def read_compact_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    view, pos = read_compact_nullable_bytes_view(buf, pos)
    return (None if view is None else bytes(view)), pos



def _utf8(value: str, kind: str) -> bytes:
    if not isinstance(value, str):
        raise EncodeError(f"{kind}: expected str, got {type(value).__name__}")
    return value.encode("utf-8")


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += NULL_INT16
        return
    data = _utf8(value, "string")
    if len(data) > 0x7FFF:
        raise EncodeError(f"string of {len(data)} bytes is longer than 32767")
    out += INT16.pack(len(data))
    out += data



def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    data = _utf8(value, "compact string")
    _write_leb128(out, len(data) + 1)
    out += data



def write_nullable_bytes(out: bytearray, value: Any) -> None:
    if value is None:
        out += NULL_INT32
        return
    out += INT32.pack(byte_length(value))
    out += value



def write_compact_nullable_bytes(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
        return
    _write_leb128(out, byte_length(value) + 1)
    out += value



def byte_length(value: Any) -> int:
    """Length in bytes of a bytes-like value (a memoryview's ``len`` counts items, not bytes)."""
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, bytes | bytearray):
        return len(value)
    raise EncodeError(f"expected a bytes-like value, got {type(value).__name__}")


# -- arrays --------------------------------------------------------------------------------------


def _check_count(buf: Any, pos: int, n: int, min_item_bytes: int, kind: str) -> None:
    """Refuse a count the remaining bytes could not hold, before building anything."""
    if n * max(min_item_bytes, 1) > len(buf) - pos:
        raise DecodeError(
            f"{kind} claims {n} items of >= {min_item_bytes} bytes at {pos}, "
            f"but only {len(buf) - pos} bytes remain"
        )


def _read_items(buf: Any, pos: int, n: int, read_item: Reader) -> tuple[list, int]:
    items = []
    append = items.append
    for _ in range(n):
        item, pos = read_item(buf, pos)
        append(item)
    return items, pos


def read_nullable_array(
    buf: Any, pos: int, read_item: Reader, min_item_bytes: int = 1
) -> tuple[list | None, int]:
    n, pos = read_int32(buf, pos)
    if n < 0:
        if n == -1:
            return None, pos
        raise DecodeError(f"array has negative count {n}")
    _check_count(buf, pos, n, min_item_bytes, "array")
    return _read_items(buf, pos, n, read_item)



def read_compact_nullable_array(
    buf: Any, pos: int, read_item: Reader, min_item_bytes: int = 1
) -> tuple[list | None, int]:
    n, pos = read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    _check_count(buf, pos, n - 1, min_item_bytes, "compact array")
    return _read_items(buf, pos, n - 1, read_item)



def write_nullable_array(out: bytearray, items: list | None, write_item: Writer) -> None:
    if items is None:
        out += NULL_INT32
        return
    out += INT32.pack(len(items))
    for item in items:
        write_item(out, item)



def write_compact_nullable_array(out: bytearray, items: list | None, write_item: Writer) -> None:
    if items is None:
        out.append(0)
        return
    _write_leb128(out, len(items) + 1)
    for item in items:
        write_item(out, item)



# -- tagged fields (KIP-482) ---------------------------------------------------------------------


def read_tagged_fields(buf: Any, pos: int) -> tuple[dict[int, Any], int]:
    """A tagged-field section as ``{tag: slice of buf}``; the caller decodes the tags it knows
    and ignores the rest, which is how unknown (newer) tags are skipped."""
    count, pos = read_unsigned_varint(buf, pos)
    _check_count(buf, pos, count, 2, "tagged fields")
    fields: dict[int, Any] = {}
    for _ in range(count):
        tag, pos = read_unsigned_varint(buf, pos)
        size, pos = read_unsigned_varint(buf, pos)
        end = _end(buf, pos, size, f"tagged field {tag}")
        if tag in fields:
            raise DecodeError(f"tagged field {tag} appears twice")
        fields[tag] = buf[pos:end]
        pos = end
    return fields, pos


def skip_tagged_fields(buf: Any, pos: int) -> int:
    return read_tagged_fields(buf, pos)[1]


def write_empty_tagged_fields(out: bytearray) -> None:
    out.append(0)


def write_tagged_fields(out: bytearray, fields: list[tuple[int, bytes]]) -> None:
    """Write ``(tag, encoded value)`` pairs, in ascending tag order as Kafka requires."""
    _write_leb128(out, len(fields))
    for tag, data in sorted(fields, key=lambda item: item[0]):
        _write_leb128(out, tag)
        _write_leb128(out, len(data))
        out += data


# -- non-nullable variants: the nullable codec plus a null check ---------------------------------


def non_null_reader(read_nullable: Callable[..., tuple[Any, int]], kind: str) -> Reader:
    def read(buf: Any, pos: int, *args: Any) -> tuple[Any, int]:
        value, end = read_nullable(buf, pos, *args)
        if value is None:
            raise DecodeError(f"non-nullable {kind} at {pos} is null")
        return value, end

    read.__name__ = read_nullable.__name__.replace("nullable_", "")
    return read


def non_null_writer(write_nullable: Callable[..., None], kind: str) -> Writer:
    def write(out: bytearray, value: Any, *args: Any) -> None:
        if value is None:
            raise EncodeError(f"non-nullable {kind} is None")
        write_nullable(out, value, *args)

    write.__name__ = write_nullable.__name__.replace("nullable_", "")
    return write


read_string = non_null_reader(read_nullable_string, "string")
read_compact_string = non_null_reader(read_compact_nullable_string, "compact string")
read_bytes = non_null_reader(read_nullable_bytes, "bytes")
read_compact_bytes = non_null_reader(read_compact_nullable_bytes, "compact bytes")
read_array = non_null_reader(read_nullable_array, "array")
read_compact_array = non_null_reader(read_compact_nullable_array, "compact array")
write_string = non_null_writer(write_nullable_string, "string")
write_compact_string = non_null_writer(write_compact_nullable_string, "compact string")
write_bytes = non_null_writer(write_nullable_bytes, "bytes")
write_compact_bytes = non_null_writer(write_compact_nullable_bytes, "compact bytes")
write_array = non_null_writer(write_nullable_array, "array")
write_compact_array = non_null_writer(write_compact_nullable_array, "compact array")
