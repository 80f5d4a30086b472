"""The types a schema field can have, and which primitive reads or writes each one.

A field type answers four questions for the interpreter in :mod:`klog.protocol.codec`: which
reader and which writer to use for a given version, flexibility and nullability; the fewest
bytes one value can take (to bound array counts); and the default value. Types carry Kafka's
JSON type name (``int32``, ``string``, ``[]TopicProduceData``) so a test can compare our
declarations with Kafka's schema files.

``records`` is special: it decodes to a zero-copy slice of the request buffer and encodes from
bytes-like values, ``None``, :class:`~klog.protocol.chunks.FileRegion` placeholders, or a list of
those (several file regions for one partition), which the chunk writer passes through uncopied.
"""

from __future__ import annotations

from typing import Any

from klog.protocol import primitives as p
from klog.protocol.chunks import ChunkWriter, FileRegion, chunk_length
from klog.protocol.exceptions import EncodeError


class FieldType:
    """Base class. ``fixed_format`` is a ``struct`` format character for fixed-width types, so
    the interpreter can read a run of them with one ``unpack_from``."""

    kafka_name: str = ""
    fixed_format: str | None = None

    def reader(self, version: int, flexible: bool, nullable: bool) -> p.Reader:
        raise NotImplementedError

    def writer(self, version: int, flexible: bool, nullable: bool) -> p.Writer:
        raise NotImplementedError

    def min_bytes(self, version: int, flexible: bool) -> int:
        raise NotImplementedError

    def default(self) -> Any:
        return None

    def __repr__(self) -> str:
        return self.kafka_name


class Fixed(FieldType):
    def __init__(self, kafka_name: str, fmt: str, size: int, default: Any,
                 read: p.Reader, write: p.Writer) -> None:  # fmt: skip
        self.kafka_name, self.fixed_format, self.size = kafka_name, fmt, size
        self._default, self._read, self._write = default, read, write

    def reader(self, version: int, flexible: bool, nullable: bool) -> p.Reader:
        return self._read

    def writer(self, version: int, flexible: bool, nullable: bool) -> p.Writer:
        return self._write

    def min_bytes(self, version: int, flexible: bool) -> int:
        return self.size

    def default(self) -> Any:
        return self._default


INT8 = Fixed("int8", "b", 1, 0, p.read_int8, p.write_int8)
INT16 = Fixed("int16", "h", 2, 0, p.read_int16, p.write_int16)
INT32 = Fixed("int32", "i", 4, 0, p.read_int32, p.write_int32)
INT64 = Fixed("int64", "q", 8, 0, p.read_int64, p.write_int64)
UINT16 = Fixed("uint16", "H", 2, 0, p.read_uint16, p.write_uint16)
FLOAT64 = Fixed("float64", "d", 8, 0.0, p.read_float64, p.write_float64)
BOOL = Fixed("bool", "?", 1, False, p.read_bool, p.write_bool)


class _Uuid(FieldType):
    kafka_name = "uuid"

    def reader(self, version: int, flexible: bool, nullable: bool) -> p.Reader:
        return p.read_uuid

    def writer(self, version: int, flexible: bool, nullable: bool) -> p.Writer:
        return p.write_uuid

    def min_bytes(self, version: int, flexible: bool) -> int:
        return p.UUID_BYTES

    def default(self) -> Any:
        return p.ZERO_UUID


UUID = _Uuid()


class _Sized(FieldType):
    """A length-prefixed type: four codecs, (classic | compact) x (nullable | not)."""

    def __init__(self, kafka_name: str, default: Any, classic_prefix: int,
                 readers: tuple[p.Reader, ...], writers: tuple[p.Writer, ...]) -> None:  # fmt: skip
        self.kafka_name, self._default, self._classic_prefix = kafka_name, default, classic_prefix
        self._readers, self._writers = readers, writers

    def reader(self, version: int, flexible: bool, nullable: bool) -> p.Reader:
        return self._readers[2 * flexible + nullable]

    def writer(self, version: int, flexible: bool, nullable: bool) -> p.Writer:
        return self._writers[2 * flexible + nullable]

    def min_bytes(self, version: int, flexible: bool) -> int:
        return 1 if flexible else self._classic_prefix

    def default(self) -> Any:
        return self._default


STRING = _Sized(
    "string", "", 2,
    (p.read_string, p.read_nullable_string, p.read_compact_string, p.read_compact_nullable_string),
    (p.write_string, p.write_nullable_string, p.write_compact_string,
     p.write_compact_nullable_string),
)  # fmt: skip
BYTES = _Sized(
    "bytes", b"", 4,
    (p.read_bytes, p.read_nullable_bytes, p.read_compact_bytes, p.read_compact_nullable_bytes),
    (p.write_bytes, p.write_nullable_bytes, p.write_compact_bytes, p.write_compact_nullable_bytes),
)  # fmt: skip


def _records_writer(flexible: bool, nullable: bool) -> p.Writer:
    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError("non-nullable records are None")
            out += b"\x00" if flexible else p.NULL_INT32
            return
        pieces = value if isinstance(value, list | tuple) else (value,)
        total = sum(chunk_length(piece) for piece in pieces)
        if flexible:
            p.write_unsigned_varint(out, total + 1)
        else:
            out += p.INT32.pack(total)
        for piece in pieces:
            if isinstance(out, ChunkWriter):
                out.passthrough(piece)
            elif isinstance(piece, FileRegion):
                raise EncodeError("a FileRegion needs a ChunkWriter to pass it through")
            else:
                out += piece

    return write


def _records_reader(flexible: bool, nullable: bool) -> p.Reader:
    read = p.read_compact_nullable_bytes_view if flexible else p.read_nullable_bytes_view
    return read if nullable else p.non_null_reader(read, "records")


RECORDS = _Sized(
    "records", None, 4,
    tuple(_records_reader(f, n) for f in (False, True) for n in (False, True)),
    tuple(_records_writer(f, n) for f in (False, True) for n in (False, True)),
)  # fmt: skip


class Array(FieldType):
    """``[]item``: an array of a primitive type or of a struct (a Struct subclass)."""

    def __init__(self, item: Any) -> None:
        self.item = as_field_type(item)
        self.kafka_name = "[]" + self.item.kafka_name

    def reader(self, version: int, flexible: bool, nullable: bool) -> p.Reader:
        read_item = self.item.reader(version, flexible, False)
        min_item = self.item.min_bytes(version, flexible)
        if flexible:
            read_list = p.read_compact_nullable_array if nullable else p.read_compact_array
        else:
            read_list = p.read_nullable_array if nullable else p.read_array
        return lambda buf, pos: read_list(buf, pos, read_item, min_item)

    def writer(self, version: int, flexible: bool, nullable: bool) -> p.Writer:
        write_item = self.item.writer(version, flexible, False)
        if flexible:
            write_list = p.write_compact_nullable_array if nullable else p.write_compact_array
        else:
            write_list = p.write_nullable_array if nullable else p.write_array
        return lambda out, items: write_list(out, items, write_item)

    def min_bytes(self, version: int, flexible: bool) -> int:
        return 1 if flexible else 4

    def default(self) -> Any:
        return []


def as_field_type(value: Any) -> FieldType:
    """A FieldType as is; a Struct subclass (anything with ``struct_type()``) wrapped."""
    if isinstance(value, FieldType):
        return value
    to_type = getattr(value, "struct_type", None)
    if to_type is None:
        raise TypeError(f"not a field type: {value!r}")
    return to_type()
