"""A small declaration language for Kafka messages: one class per message, never per version.

A message or nested struct is a class whose attributes are :class:`Field` declarations, in wire
order, each with the versions it exists in (Kafka's notation: ``"0+"``, ``"3-8"``, ``"5"``)::

    class PartitionProduceData(Struct):
        index = Field(INT32)
        records = Field(RECORDS, nullable="0+")

    class ProduceRequest(Message, versions="0-8", flexible="9+"):
        transactional_id = Field(STRING, "3+", nullable="3+")
        acks = Field(INT16)
        ...
        topic_data = Field(Array(TopicProduceData))

Names are the snake_case of Kafka's JSON field names and struct classes carry Kafka's type names,
so ``tests/protocol/test_schema_vs_kafka.py`` can check every declaration against Kafka's own
schema files. Instances are plain objects: constructed by keyword, a missing field takes its
default (``0``, ``""``, ``[]``, ``False``, ``None`` where the field is nullable in some version,
or the explicit ``default=``), and decoded instances have every declared field as an attribute,
including those absent from the decoded version (at their defaults). A list or struct default
is made on first use (`Field.__get__`), so a field nobody reads costs nothing; the
encoder treats one never made as its default.

Encoding and decoding are interpreted from the declarations by :mod:`klog.protocol.codec`, which
compiles a plan per (class, version) once and caches it on the class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from klog.protocol import codec
from klog.protocol.fieldtypes import FieldType, as_field_type


class Versions:
    """An inclusive version range parsed from Kafka's notation; ``None`` means no version."""

    __slots__ = ("low", "high")

    def __init__(self, spec: str | None) -> None:
        if spec is None or spec == "none":
            self.low, self.high = 1, 0  # empty
        elif spec.endswith("+"):
            self.low, self.high = int(spec[:-1]), 0x7FFF
        elif "-" in spec:
            low, high = spec.split("-")
            self.low, self.high = int(low), int(high)
        else:
            self.low = self.high = int(spec)

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __bool__(self) -> bool:
        return self.low <= self.high

    def __iter__(self) -> Any:
        return iter(range(self.low, self.high + 1))

    def __repr__(self) -> str:
        return f"Versions({self.low}-{self.high})"


_MISSING: Any = object()


class Field:
    """One field: its type, the versions it exists in, where it may be null, its default, and
    (for KIP-482 tagged fields) its tag and the versions in which it travels tagged."""

    def __init__(
        self,
        type: Any,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
        tag: int | None = None,
        tagged: str | None = None,
    ) -> None:
        self.type: FieldType = as_field_type(type)
        self.versions = Versions(versions)
        self.nullable = Versions(nullable)
        self.tag = tag
        if tag is not None and tagged is None:
            tagged = versions  # Kafka's usual case: tagged in every version it exists in
        self.tagged = Versions(tagged)
        self.name = ""
        self._default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        """On the class, the declaration. On an instance, reached only while the instance
        has no value of its own (a value in its ``__dict__`` comes first): a list or struct
        default, made now and kept. Why not at construction: a Fetch answer's partition has
        three tagged structs that a version below 12 never sends, and a newer one sends only
        when set; made with every instance, they were most of what an idle consumer of
        10,000 partitions cost its leader."""
        if obj is None:
            return self
        value, factory = self.default_factory()
        if factory is not None:
            value = obj.__dict__[self.name] = factory()
        return value

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged

    def default_factory(self) -> tuple[Any, Callable[[], Any] | None]:
        """``(value, None)`` for an immutable default, ``(None, factory)`` for a mutable one."""
        if self._default is not _MISSING:
            value = self._default
        elif self.nullable:
            value = None
        else:
            value = self.type.default()
        if isinstance(value, list):
            return None, list
        if isinstance(value, Struct):
            return None, type(value)
        return value, None

    def default(self) -> Any:
        value, factory = self.default_factory()
        return factory() if factory is not None else value

    def __repr__(self) -> str:
        return f"Field({self.name}: {self.type!r} {self.versions})"


class Struct:
    """Base class of declared structs; see the module docstring."""

    fields: ClassVar[tuple[Field, ...]] = ()
    _names: ClassVar[frozenset[str]] = frozenset()
    _static_defaults: ClassVar[dict[str, Any]] = {}
    _codecs: ClassVar[dict[tuple[int, bool], codec.StructCodec]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.fields = tuple(v for v in vars(cls).values() if isinstance(v, Field))
        cls._names = frozenset(f.name for f in cls.fields)
        static = {}
        for field in cls.fields:  # a list or struct default is made on use (Field.__get__)
            value, factory = field.default_factory()
            if factory is None:
                static[field.name] = value
        cls._static_defaults = static
        cls._codecs = {}

    def __init__(self, **values: Any) -> None:
        if not values.keys() <= self._names:
            unknown = ", ".join(sorted(values.keys() - self._names))
            raise TypeError(f"{type(self).__name__} has no field(s) {unknown}")
        d = self.__dict__
        d.update(self._static_defaults)
        d.update(values)

    @classmethod
    def struct_type(cls) -> FieldType:
        return StructType(cls)

    @classmethod
    def codec(cls, version: int, flexible: bool) -> codec.StructCodec:
        """The compiled reader and writer of this struct at ``version`` (cached)."""
        key = (version, flexible)
        compiled = cls._codecs.get(key)
        if compiled is None:
            compiled = cls._codecs[key] = codec.compile_struct(cls, version, flexible)
        return compiled

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in self.fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass

    def __repr__(self) -> str:
        parts = ", ".join(f"{f.name}={_short_repr(getattr(self, f.name))}" for f in self.fields)
        return f"{type(self).__name__}({parts})"


def _short_repr(value: Any) -> str:
    if isinstance(value, memoryview):
        return f"<{value.nbytes} bytes>"
    return repr(value)


class Message(Struct):
    """A top-level request or response body: a struct with valid versions and the first
    flexible (KIP-482) version, if any."""

    versions: ClassVar[Versions] = Versions(None)
    first_flexible: ClassVar[int | None] = None

    def __init_subclass__(cls, *, versions: str = "", flexible: str = "none", **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.versions = Versions(versions)
        cls.first_flexible = None if flexible == "none" else int(flexible.rstrip("+"))

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Flexibility holds for every version from the first flexible one on, declared or not
        (so the header of a too-new request can still be read)."""
        return cls.first_flexible is not None and version >= cls.first_flexible

    @classmethod
    def decode(cls, buf: Any, version: int) -> Any:
        """Decode a whole body; bytes left over are an error. Raises DecodeError."""
        return codec.decode_message(cls, buf, version)

    def encode_into(self, out: bytearray, version: int) -> None:
        """Append this body at ``version`` to ``out`` (a ChunkWriter for records). Raises
        EncodeError."""
        codec.encode_message(type(self), self, out, version)


class StructType(FieldType):
    """A nested struct used as a field type (directly, or as the item type of an array)."""

    def __init__(self, cls: type[Struct]) -> None:
        self.cls = cls
        self.kafka_name = cls.__name__

    def reader(self, version: int, flexible: bool, nullable: bool) -> Any:
        return self.cls.codec(version, flexible).read

    def writer(self, version: int, flexible: bool, nullable: bool) -> Any:
        return self.cls.codec(version, flexible).write

    def min_bytes(self, version: int, flexible: bool) -> int:
        return self.cls.codec(version, flexible).min_bytes

    def default(self) -> Any:
        return self.cls()
