"""JSON log lines into table rows: one Arrow batch of klog records in, the events batch and
the rejects batch out. Runs on executors, in the hourly load's tasks (`klog_pipeline.hour_task`).

A batch of plain lines is parsed in bulk by pyarrow's JSON reader (`klog_pipeline.events_bulk`,
2.6x faster, measured), which first proves its answer is the one below; any other batch
takes this module's per-line path, the reference. Here parsing is orjson, one call per line;
the rest works per column.

Each schema column is gathered once (``event.get(name)``), its value types checked as a set,
and handed to pyarrow whole; only a column whose types do not fit takes the slow path, value
by value, to find the rows to reject. (pyarrow alone would not do: it silently truncates 1.5
into a bigint column and turns true into 1.0.)

A line becomes a reject, with its partition, offset, timestamp, key, raw value and the
reason, when it is not JSON, not a JSON object, null, or has a field whose value the column's
type cannot hold (a string in a bigint column, a fraction in a bigint, a number in a boolean).
A reject is never dropped: `klog_pipeline.hour_task` writes it to the ``_rejects`` table.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from klog_pipeline.event_schema import ARROW_TYPES, REJECTS, TIMESTAMP, EventSchema
from klog_pipeline.events_bulk import parse_bulk

NONE = type(None)
FAST_TYPES = {"string": {str, NONE}, "bigint": {int, NONE}, "int": {int, NONE},
              "double": {float, int, NONE}, "boolean": {bool, NONE}}
INT_RANGES = {"bigint": (-(2**63), 2**63 - 1), "int": (-(2**31), 2**31 - 1)}
JSON_TYPES = {str: "string", int: "number", float: "number", bool: "boolean", dict: "object",
              list: "array"}


def parse_batch(batch: pa.RecordBatch, schema: EventSchema
                ) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """``batch`` has the columns key, value, partition, offset, timestamp. Returns the events
    (``schema.arrow()``) and the rejects (`REJECTS`, None when every line parsed). A batch
    of plain lines takes the bulk path (`klog_pipeline.events_bulk`), with the same answer."""
    bulk = parse_bulk(batch, schema)
    if bulk is not None:
        return bulk, None
    events, reasons = load_events(batch.column("value").to_pylist())
    columns = [_column(events, name, kind, reasons) for name, kind in schema.fields]
    columns += [batch.column("key"), batch.column("partition"), batch.column("offset"),
                batch.column("timestamp").cast(TIMESTAMP), _extra(events, schema.names)]
    parsed = pa.RecordBatch.from_arrays(columns, schema=schema.arrow())
    if not reasons:
        return parsed, None
    keep = pa.array([i not in reasons for i in range(len(events))], pa.bool_())
    return parsed.filter(keep), _rejects(batch, reasons)


def load_events(values: list) -> tuple[list[dict], dict[int, str]]:
    """Each value parsed; a value that is not a JSON object becomes ``{}`` with a reason."""
    loads = orjson.loads
    try:
        events = list(map(loads, values))
    except (orjson.JSONDecodeError, TypeError):
        return _load_each(values)
    if set(map(type, events)) == {dict}:
        return events, {}
    reasons = {i: f"not a JSON object ({_json_type(e)})" for i, e in enumerate(events)
               if type(e) is not dict}
    return [e if type(e) is dict else {} for e in events], reasons


def _load_each(values: list) -> tuple[list[dict], dict[int, str]]:
    events: list[dict] = []
    reasons: dict[int, str] = {}
    for i, value in enumerate(values):
        if value is None:
            event, reasons[i] = {}, "null value"
        else:
            try:
                event = orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                event, reasons[i] = {}, f"not JSON: {exc}"
        if type(event) is not dict:
            event, reasons[i] = {}, f"not a JSON object ({_json_type(event)})"
        events.append(event)
    return events, reasons


def _column(events: list[dict], name: str, kind: str, reasons: dict[int, str]) -> pa.Array:
    values = [e.get(name) for e in events]
    if set(map(type, values)) <= FAST_TYPES[kind]:
        try:
            return pa.array(values, ARROW_TYPES[kind])
        except (OverflowError, pa.ArrowInvalid):
            pass  # an integer out of range: the slow path names it
    return pa.array(_convert(values, name, kind, reasons), ARROW_TYPES[kind])


def _convert(values: list, name: str, kind: str, reasons: dict[int, str]) -> list:
    out = []
    for i, value in enumerate(values):
        if value is None:
            out.append(None)
        elif kind == "string":
            out.append(value if type(value) is str else orjson.dumps(value).decode())
        elif _fits(value, kind):
            out.append(float(value) if kind == "double" else value)
        else:
            reasons.setdefault(i, f"field {name!r}: expected {kind}, got {_json_type(value)} "
                                  f"{orjson.dumps(value).decode()[:40]}")
            out.append(None)
    return out


def _fits(value, kind: str) -> bool:
    if kind == "boolean":
        return type(value) is bool
    if kind == "double":
        return type(value) in (int, float)
    low, high = INT_RANGES[kind]
    return type(value) is int and low <= value <= high


def _extra(events: list[dict], names: frozenset[str]) -> pa.Array:
    """The JSON of the fields outside the schema, per row (null when there are none)."""
    if all(map(names.issuperset, events)):
        return pa.nulls(len(events), pa.string())
    return pa.array([
        None if names.issuperset(e)
        else orjson.dumps({k: v for k, v in e.items() if k not in names}).decode()
        for e in events], pa.string())


def _rejects(batch: pa.RecordBatch, reasons: dict[int, str]) -> pa.RecordBatch:
    rows = sorted(reasons)
    picked = batch.take(pa.array(rows, pa.int64()))
    return pa.RecordBatch.from_arrays(
        [picked.column("partition"), picked.column("offset"),
         picked.column("timestamp").cast(TIMESTAMP), picked.column("key"),
         picked.column("value"), pa.array([reasons[i] for i in rows], pa.string())],
        schema=REJECTS)


def _json_type(value) -> str:
    return "null" if value is None else JSON_TYPES.get(type(value), type(value).__name__)
