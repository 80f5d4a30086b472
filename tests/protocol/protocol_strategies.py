"""Hypothesis strategies derived from our own declarations: any valid message at any version."""

from __future__ import annotations

from hypothesis import strategies as st

from klog.protocol import fieldtypes as ft
from klog.protocol.schema import StructType

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def message(cls, version: int) -> st.SearchStrategy:
    return struct(cls, version, cls.is_flexible(version))


def struct(cls, version: int, flexible: bool) -> st.SearchStrategy:
    kwargs = {}
    for field in cls.fields:
        if version in field.versions or (flexible and field.is_tagged(version)):
            value = _value(field.type, version, flexible)
            if field.is_nullable(version):
                value = st.none() | value
            kwargs[field.name] = value
    return st.builds(cls, **kwargs)


def _value(ftype, version: int, flexible: bool) -> st.SearchStrategy:
    name = ftype.kafka_name
    if name in _INT_RANGES:
        low, high = _INT_RANGES[name]
        return st.integers(low, high)
    if ftype is ft.BOOL:
        return st.booleans()
    if ftype is ft.FLOAT64:
        return st.floats(allow_nan=False)
    if ftype is ft.UUID:
        return st.uuids()
    if ftype is ft.STRING:
        return st.text(max_size=12)
    if ftype is ft.BYTES:
        return st.binary(max_size=12)
    if ftype is ft.RECORDS:
        return st.binary(max_size=40)
    if isinstance(ftype, ft.Array):
        return st.lists(_value(ftype.item, version, flexible), max_size=3)
    if isinstance(ftype, StructType):
        return struct(ftype.cls, version, flexible)
    raise TypeError(f"no strategy for {ftype!r}")
