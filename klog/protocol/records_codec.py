"""Which records codec runs: the compiled one when it is built and not switched off, else the
pure-Python reference.

:mod:`klog.protocol.records` calls the three functions here (``encode_one`` for
``BatchBuilder.append``, ``encode_all`` for ``build_batch``, ``decode_records`` for every
decoded batch); each has the signature and result of its pure twin in
:mod:`~klog.protocol.records_encode` / :mod:`~klog.protocol.records_decode`.

``compiled_columns`` is the compiled columnar decoder, or None, for
:mod:`klog.protocol.records_columns`; ``compiled_map_keys``, ``compiled_kept_records``,
``key_digest``, ``table_put``, ``table_get`` and ``table_move`` are the log cleaner's key
passes and offset table (``_recordsc_keys.c``), or None, for
:mod:`appliance.segments.key_passes` and ``offset_map``, which hold their pure path.

The compiled codec (``klog.protocol._recordsc``, C, built by ``setup.py`` during ``pip install``)
answers None for anything but plainly well-formed input, and these wrappers then ask the pure
codec, which gives the same result or raises the reference's error (TypeError, ValueError,
CorruptBatchError, with the same messages). So callers cannot tell the two apart except by
speed; ``tests/protocol/test_records_compiled.py`` checks that they agree.

``KLOG_PURE_PYTHON=1`` (any value but empty or ``0``) forces the pure codec. The extension reads
it once, in its own init (``PURE_PYTHON_REQUESTED``): klog.protocol imports no ``os`` (its
sans-IO contract in pyproject.toml), and the switch only has a meaning where the extension
exists. ``IMPLEMENTATION`` says which codec runs (``"C"`` or ``"python"``) and
``FALLBACK_REASON`` why the pure one does; nothing is logged (this package has no logging),
so tools that care print these.
"""

from __future__ import annotations

from klog.protocol import records_decode, records_encode

try:
    from klog.protocol import _recordsc
except ImportError as exc:  # built optionally: no compiler or headers at install time
    _recordsc = None
    FALLBACK_REASON = f"the compiled codec is not built ({exc})"
else:
    if _recordsc.PURE_PYTHON_REQUESTED:
        _recordsc = None
        FALLBACK_REASON = "KLOG_PURE_PYTHON is set"
    else:
        FALLBACK_REASON = ""

__all__ = ["FALLBACK_REASON", "IMPLEMENTATION", "compiled_columns", "compiled_kept_records",
           "compiled_map_keys", "decode_records", "encode_all", "encode_one", "key_digest",
           "table_get", "table_move", "table_put"]

IMPLEMENTATION = "python" if _recordsc is None else "C"
# the columnar decoder (klog.protocol.records_columns) has its pure path in its own module
compiled_columns = None if _recordsc is None else _recordsc.decode_columns
# the log cleaner's passes keep their pure path in appliance.segments.key_passes
compiled_map_keys = None if _recordsc is None else _recordsc.map_keys
compiled_kept_records = None if _recordsc is None else _recordsc.kept_records
key_digest = None if _recordsc is None else _recordsc.key_digest
table_put = None if _recordsc is None else _recordsc.table_put
table_get = None if _recordsc is None else _recordsc.table_get
table_move = None if _recordsc is None else _recordsc.table_move

if _recordsc is None:
    encode_one = records_encode.encode_one
    encode_all = records_encode.encode_all
    decode_records = records_decode.decode_records
else:

    def encode_one(offset_delta: int, timestamp, base_ts: int, key, value, headers,
                   now_ms: int | None, *, _compiled=_recordsc.encode_record,
                   _pure=records_encode.encode_one) -> tuple[bytes, bytes, int]:
        """One record: ``(prefix, body, timestamp)``, as ``records_encode.encode_one``."""
        out = _compiled(offset_delta, timestamp, base_ts, key, value, headers, now_ms)
        if out is None:
            return _pure(offset_delta, timestamp, base_ts, key, value, headers, now_ms)
        return out

    def encode_all(records: list, base_ts: int, now_ms: int | None, *,
                   _compiled=_recordsc.encode_records,
                   _pure=records_encode.encode_all) -> tuple[list[bytes], int]:
        """``(parts, max_timestamp)`` of ``records``, as ``records_encode.encode_all``."""
        out = _compiled(records, base_ts, now_ms)
        if out is None:
            return _pure(records, base_ts, now_ms)
        body, max_ts = out
        return [body], max_ts

    def decode_records(data, start: int, end: int, count: int, base_offset: int, base_ts: int,
                       record_type: type = records_decode.Record, *,
                       _compiled=_recordsc.decode_records,
                       _pure=records_decode.decode_records) -> list:
        """The ``count`` records of ``data[start:end]``, as ``records_decode.decode_records``;
        raises CorruptBatchError (by the pure decoder) for malformed records."""
        records = _compiled(data, start, end, count, base_offset, base_ts, record_type)
        if records is None:
            return _pure(data, start, end, count, base_offset, base_ts, record_type)
        return records
