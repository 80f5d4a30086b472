"""The interpreter: turns a struct's declared fields into a reader and a writer for one version.

:func:`compile_struct` runs once per (struct class, version, flexibility) and the result is
cached on the class (:meth:`klog.protocol.schema.Struct.codec`), so the per-request work is a
loop over prepared steps with no version checks left in it. Two things keep that loop short:

- A run of adjacent fixed-width fields (ints, bools) becomes one precompiled ``struct.Struct``,
  read with one ``unpack_from`` and written with one ``pack``. The Fetch request's partition
  (``partition, current_leader_epoch, fetch_offset, log_start_offset, partition_max_bytes``)
  is a single unpack.
- A decoded object gets its attribute dict in one assignment: the steps fill a ``dict``, the
  fields absent from this version are added from precomputed defaults.

Errors: readers raise :class:`DecodeError` with the path of struct and field names that failed;
writers raise :class:`EncodeError` the same way, turning ``struct.error``, ``TypeError`` and
friends raised by bad values into it. Nothing else escapes :func:`decode_message`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from klog.protocol.chunks import encoded_value
from klog.protocol.exceptions import DecodeError, EncodeError
from klog.protocol.primitives import read_int32, read_tagged_fields, write_tagged_fields

ReadStep = Callable[[Any, int, dict], int]
WriteStep = Callable[[bytearray, Any], None]

#: Exceptions a bad value can raise inside a writer or a malformed buffer inside a reader.
_VALUE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError, IndexError)


class StructCodec:
    """A struct's compiled ``read(buf, pos) -> (obj, pos)`` and ``write(out, obj)`` for one
    version, and the fewest bytes an encoded instance can take (to bound array counts).

    When every field of that version is fixed-width (a Fetch partition, an ApiVersions entry),
    ``fixed`` is the one ``struct.Struct`` for the whole struct and ``build(values)`` makes an
    instance from its unpacked tuple, so an array of them is read with ``iter_unpack``.
    """

    __slots__ = ("read", "write", "min_bytes", "fixed", "build")

    def __init__(self, read: Any, write: Any, min_bytes: int,
                 fixed: struct.Struct | None = None, build: Any = None) -> None:  # fmt: skip
        self.read, self.write, self.min_bytes = read, write, min_bytes
        self.fixed, self.build = fixed, build


def compile_struct(cls: Any, version: int, flexible: bool) -> StructCodec:
    """Plan ``cls`` at ``version``: which fields travel, in which order, how, and the
    defaults of the ones that do not. Nested structs are compiled (and cached) on the way."""
    tagged = [f for f in cls.fields if flexible and f.is_tagged(version)]
    regular = [f for f in cls.fields if version in f.versions and f not in tagged]
    absent = [f for f in cls.fields if f not in regular]  # tagged ones too: their defaults
    read_steps, write_steps = _steps(regular, version, flexible)
    min_bytes = sum(f.type.min_bytes(version, flexible) for f in regular) + flexible
    read_tags = _tag_reader(tagged, version) if flexible else None
    write_tags = _tag_writer(tagged, version) if flexible else None
    write = _struct_writer(cls, write_steps, write_tags)
    if not flexible and regular and all(f.type.fixed_format for f in regular):
        fixed = struct.Struct(">" + "".join(f.type.fixed_format for f in regular))
        build = _builder(cls, tuple(f.name for f in regular), absent)
        return StructCodec(_fixed_reader(fixed, build), write, min_bytes, fixed, build)
    return StructCodec(_struct_reader(cls, read_steps, absent, read_tags), write, min_bytes)


def _builder(cls: Any, names: tuple[str, ...], absent: list) -> Callable[[tuple], Any]:
    static = _absent_defaults(absent)
    new = object.__new__

    def build(values: tuple) -> Any:
        obj = new(cls)
        obj.__dict__ = d = dict(zip(names, values))
        if static:
            d.update(static)
        return obj

    return build


def _fixed_reader(fixed: struct.Struct, build: Callable[[tuple], Any]) -> Any:
    unpack_from, size = fixed.unpack_from, fixed.size

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        try:
            return build(unpack_from(buf, pos)), pos + size
        except struct.error:
            raise DecodeError(f"{size} bytes at {pos} run past the end ({len(buf)})") from None

    return read


def _fixed_array_reader(item: StructCodec, nullable: bool) -> Any:
    """An array of all-fixed-width structs: one bounds check, then ``iter_unpack``."""
    iter_unpack, size, build = item.fixed.iter_unpack, item.fixed.size, item.build  # type: ignore[union-attr]

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = read_int32(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            raise DecodeError(f"array count {n} at {pos - 4} where null is not allowed")
        end = pos + n * size
        if end > len(buf):
            raise DecodeError(f"array of {n} x {size} bytes at {pos} runs past the end")
        return [build(values) for values in iter_unpack(buf[pos:end])], end

    return read


def _reader_for(field: Any, version: int, flexible: bool, nullable: bool) -> Any:
    item_cls = getattr(getattr(field.type, "item", None), "cls", None)
    if item_cls is not None and not flexible:
        item = item_cls.codec(version, flexible)
        if item.fixed is not None:
            return _fixed_array_reader(item, nullable)
    return field.type.reader(version, flexible, nullable)


def _absent_defaults(absent: list) -> dict[str, Any]:
    """The immutable defaults of the fields a version lacks; a list or struct default is
    made on first use (`Field.__get__`)."""
    return {f.name: f.default() for f in absent if f.default_factory()[1] is None}


def _steps(fields: list, version: int, flexible: bool) -> tuple[list, list]:
    """(label, step) pairs; runs of two or more fixed-width fields are merged into one."""
    reads: list[tuple[str, ReadStep]] = []
    writes: list[tuple[str, WriteStep]] = []
    for run in _fixed_runs(fields):
        if len(run) >= 2:
            names = tuple(f.name for f in run)
            st = struct.Struct(">" + "".join(f.type.fixed_format for f in run))
            reads.append(("/".join(names), _merged_read(names, st)))
            writes.append(("/".join(names), _merged_write(names, st)))
            continue
        field = run[0]
        nullable = field.is_nullable(version)
        read = _reader_for(field, version, flexible, nullable)
        write = field.type.writer(version, flexible, nullable)
        reads.append((field.name, _single_read(field.name, read)))
        writes.append((field.name, _single_write(field.name, write)))
    return reads, writes


def _fixed_runs(fields: list) -> list[list]:
    """Split fields into runs of adjacent fixed-width fields; any other field is a run of one."""
    runs: list[list] = []
    for field in fields:
        fixed = field.type.fixed_format is not None
        if fixed and runs and runs[-1][-1].type.fixed_format is not None:
            runs[-1].append(field)
        else:
            runs.append([field])
    return runs


def _merged_read(names: tuple[str, ...], st: struct.Struct) -> ReadStep:
    unpack_from, size = st.unpack_from, st.size

    def step(buf: Any, pos: int, d: dict) -> int:
        try:
            d.update(zip(names, unpack_from(buf, pos)))
        except struct.error:
            raise DecodeError(f"{size} bytes at {pos} run past the end ({len(buf)})") from None
        return pos + size

    return step


def _merged_write(names: tuple[str, ...], st: struct.Struct) -> WriteStep:
    get, pack = attrgetter(*names), st.pack

    def step(out: bytearray, obj: Any) -> None:
        out += pack(*get(obj))

    return step


def _single_read(name: str, read: Any) -> ReadStep:
    def step(buf: Any, pos: int, d: dict) -> int:
        d[name], pos = read(buf, pos)
        return pos

    return step


def _single_write(name: str, write: Any) -> WriteStep:
    def step(out: bytearray, obj: Any) -> None:
        write(out, getattr(obj, name))

    return step


def _struct_reader(cls: Any, steps: list, absent: list, read_tags: Any) -> Any:
    static = _absent_defaults(absent)
    new, type_name = object.__new__, cls.__name__

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        d: dict[str, Any] = {}
        label = "tagged fields"
        try:
            for label, step in steps:  # noqa: B007  (label names the failing field)
                pos = step(buf, pos, d)
            if static:
                d.update(static)
            if read_tags is not None:
                label = "tagged fields"
                pos = read_tags(buf, pos, d)
        except DecodeError as exc:
            raise DecodeError(f"{type_name}.{label}: {exc}") from None
        obj = new(cls)
        obj.__dict__ = d
        return obj, pos

    return read


def _struct_writer(cls: Any, steps: list, write_tags: Any) -> Any:
    type_name = cls.__name__

    def write(out: bytearray, obj: Any) -> None:
        label = "tagged fields"
        try:
            for label, step in steps:  # noqa: B007
                step(out, obj)
            if write_tags is not None:
                label = "tagged fields"
                write_tags(out, obj)
        except EncodeError as exc:
            raise EncodeError(f"{type_name}.{label}: {exc}") from None
        except _VALUE_ERRORS as exc:
            raise EncodeError(f"{type_name}.{label}: {exc!r}") from None

    return write


def _tag_reader(tagged: list, version: int) -> Any:
    """Decode the tags we declare from their slices; skip the others (newer peers' fields)."""
    known = {f.tag: (f.name, f.type.reader(version, True, f.is_nullable(version))) for f in tagged}

    def read_tags(buf: Any, pos: int, d: dict) -> int:
        raw, pos = read_tagged_fields(buf, pos)
        for tag, data in raw.items():
            if tag in known:
                name, read = known[tag]
                d[name], end = read(data, 0)
                if end != len(data):
                    raise DecodeError(f"tagged field {name} has {len(data) - end} extra bytes")
        return pos

    return read_tags


def _tag_writer(tagged: list, version: int) -> Any:
    """Write each tagged field whose value differs from its default, as Kafka does."""
    plan = [
        (f.tag, f.name, f.type.writer(version, True, f.is_nullable(version)), f.default())
        for f in tagged
    ]
    if not plan:
        return lambda out, obj: out.append(0)

    def write_tags(out: bytearray, obj: Any) -> None:
        fields = []
        given = obj.__dict__
        for tag, name, write, default in plan:
            value = given.get(name, default)  # a list or struct never made is its default
            if value is not default and value != default:
                fields.append((tag, encoded_value(write, value)))
        write_tagged_fields(out, fields)

    return write_tags


def decode_message(cls: Any, buf: Any, version: int) -> Any:
    """Decode a whole message body at ``version``; every byte must be consumed. ``records``
    fields come out as memoryview slices of ``buf`` (which is wrapped in one if need be)."""
    if version not in cls.versions:
        raise DecodeError(f"{cls.__name__} has no version {version} (declared {cls.versions})")
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    try:
        obj, pos = cls.codec(version, cls.is_flexible(version)).read(buf, 0)
    except DecodeError as exc:
        raise DecodeError(f"{exc} (decoding v{version})") from None
    except _VALUE_ERRORS as exc:  # defensive: a reader should have said DecodeError
        raise DecodeError(f"{cls.__name__} v{version}: {exc!r}") from None
    if pos != len(buf) and not (getattr(cls, "TRAILING_TAGS_TOLERATED", False)
                                and bytes(buf[pos:]).count(0) == len(buf) - pos):
        raise DecodeError(f"{cls.__name__} v{version}: {len(buf) - pos} bytes after the body")
    return obj


def encode_message(cls: Any, obj: Any, out: bytearray, version: int) -> None:
    """Append ``obj`` encoded as ``cls`` at ``version`` to ``out``."""
    if version not in cls.versions:
        raise EncodeError(f"{cls.__name__} has no version {version} (declared {cls.versions})")
    cls.codec(version, cls.is_flexible(version)).write(out, obj)
