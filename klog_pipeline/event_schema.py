"""The columns of a topic's warehouse table: the event fields, as a small DDL, and inference.

A log event is a JSON object. The table keeps its top-level fields as typed columns, declared
in a DDL string such as ``"user string, page string, n bigint, ok boolean"``. Types: string,
bigint (alias long), int (alias integer), double, boolean. A string column holds strings as
they are and any other JSON value (object, array, number) as its JSON text; the other types
take only their JSON counterpart (see `klog_pipeline.events` for what becomes a reject).

Beside the fields, every row carries the klog coordinates ``_key``, ``_partition``,
``_offset``, ``_timestamp`` and ``_extra``: the JSON of any fields the schema does not have,
so nothing of an event is dropped when the events grow a field.

Inference (when neither ``--schema`` nor the ledger gives one) looks at sample events: a
field's type is the narrowest that holds every sampled value (bigint, then double, else
string); names that are not identifiers, that clash case-insensitively, or that are reserved
(our own columns, ``dt`` and ``hour``, the table's partition columns) stay in ``_extra``.
Pure, apart from pyarrow types.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_TYPES = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(),
               "double": pa.float64(), "boolean": pa.bool_()}
ALIASES = {"long": "bigint", "integer": "int"}
META = [("_key", pa.binary()), ("_partition", pa.int32()), ("_offset", pa.int64()),
        ("_timestamp", TIMESTAMP), ("_extra", pa.string())]
RESERVED = frozenset(["dt", "hour", *(name for name, _ in META)])
REJECTS = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", TIMESTAMP),
                     ("key", pa.binary()), ("value", pa.binary()), ("reason", pa.string())])
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class EventSchema:
    fields: tuple[tuple[str, str], ...]  # (name, type) with canonical type names

    @classmethod
    def parse(cls, ddl: str) -> EventSchema:
        """``"user string, n bigint"`` → EventSchema; ValueError names the bad part."""
        fields: list[tuple[str, str]] = []
        seen: set[str] = set()
        for part in filter(None, (p.strip() for p in ddl.split(","))):
            words = part.split()
            if len(words) != 2:
                raise ValueError(f"schema: {part!r} is not 'name type'")
            name, kind = words[0].strip("`"), ALIASES.get(words[1].lower(), words[1].lower())
            if kind not in ARROW_TYPES:
                raise ValueError(f"schema: type {words[1]!r} of {name!r} is not one of "
                                 f"{', '.join(ARROW_TYPES)}")
            if not _usable(name, seen):
                raise ValueError(f"schema: {name!r} is reserved, repeated or not an identifier")
            seen.add(name.lower())
            fields.append((name, kind))
        return cls(tuple(fields))

    @property
    def ddl(self) -> str:
        return ", ".join(f"{name} {kind}" for name, kind in self.fields)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.fields)

    def arrow(self) -> pa.Schema:
        """The Parquet schema of the events table: the fields, then the klog columns."""
        return pa.schema([(n, ARROW_TYPES[k]) for n, k in self.fields] + META)


def infer(events: Iterable[dict]) -> EventSchema:
    """The schema that holds every sampled event's fields (see the module docstring)."""
    kinds: dict[str, set[type]] = {}
    for event in events:
        for name, value in event.items():
            kinds.setdefault(name, set()).add(type(value))
    seen: set[str] = set()
    fields = []
    for name, types in kinds.items():
        if _usable(name, seen):
            seen.add(name.lower())
            fields.append((name, _narrowest(types - {type(None)})))
    return EventSchema(tuple(fields))


def _usable(name: str, seen: set[str]) -> bool:
    return bool(_NAME.match(name)) and name.lower() not in RESERVED and name.lower() not in seen


def _narrowest(types: set[type]) -> str:
    if types == {bool}:
        return "boolean"
    if types == {int}:
        return "bigint"
    if types and types <= {int, float}:
        return "double"
    return "string"
