"""`klog dump-log PATH [--records] [--json]`: the batches (and records) of one segment file.

In the spirit of Kafka's ``kafka-dump-log.sh``: a segment is ``<20-digit base offset>.log``
holding v2 record batches back to back, possibly followed by zeroed preallocated space (a
zeroed header ends the data; it is not damage). Reads the file through a read-only mmap and
the codec in :mod:`klog.protocol`; never imports the storage engine, so it works on a copy of
a segment taken anywhere, even while the appliance is down.

Output: a rich table on a terminal, Kafka-style ``key: value`` lines otherwise, one JSON
object per batch with ``--json``. Exit status: 0 when every byte up to the data's end is a
valid batch; 1 when a batch fails its CRC (shown, marked invalid), or the file ends in a torn
or corrupt tail (everything before it is printed, then the byte position and the reason);
2 when PATH is missing or not a segment file.
"""

from __future__ import annotations

import base64
import mmap
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from klog.protocol.record_batch import (
    CODEC_NAMES,
    HEADER_BYTES,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
    read_header,
)
from klog.protocol.records import CONTROL_COMMIT, Record, control_type, decode_batch

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
MAX_DECOMPRESSED_BYTES = 1 << 30  # a corrupt segment must not take the machine's memory
TABLE_ROWS = 500  # rows per rich table, so a huge segment streams instead of buffering


def add_arguments(parser) -> None:
    parser.add_argument("path", metavar="PATH", help="a segment file, <base offset>.log")
    parser.add_argument("--records", action="store_true", help="print every record too")
    parser.add_argument("--json", action="store_true", help="one JSON object per batch")


class Damage(Exception):
    """Where the valid data of a segment ends, and why."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"byte {position}: {reason}")
        self.position = position
        self.reason = reason


def scan(buf, size: int):
    """Yield ``(position, header, crc_ok)`` per batch; stop at a zeroed header, raise Damage."""
    pos = 0
    while pos < size:
        remaining = size - pos
        if not any(buf[pos : pos + min(remaining, HEADER_BYTES)]):
            return  # zeroed preallocated space: the end of the data
        if remaining < HEADER_BYTES:
            raise Damage(pos, f"torn batch header: {remaining} bytes, a header needs 61")
        header = read_header(buf, pos)
        if header.magic != MAGIC:
            raise Damage(pos, f"magic is {header.magic}, expected {MAGIC}")
        if header.batch_length < MIN_BATCH_LENGTH:
            raise Damage(pos, f"batch_length {header.batch_length} is below {MIN_BATCH_LENGTH}")
        if header.size > remaining:
            raise Damage(pos, f"torn batch: it declares {header.size} bytes, {remaining} remain")
        yield pos, header, compute_crc(buf, pos, header.size) == header.crc
        pos += header.size


def run(args) -> int:
    path = Path(args.path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        return _usage_error(f"{path} {what}")
    match = SEGMENT_NAME.match(path.name)
    if not match:
        return _usage_error(f"{path} is not a segment file (expected <20-digit base offset>.log)")
    out = _JsonOut() if args.json else _RichOut() if sys.stdout.isatty() else _PlainOut()
    out.start(path, int(match.group(1)))
    with path.open("rb") as file:
        size = path.stat().st_size
        buf = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            return _dump(buf, size, out, records=args.records)
        finally:
            if size:
                buf.close()


def _dump(buf, size: int, out, *, records: bool) -> int:
    problems = []
    batches = count = end = 0
    try:
        for pos, header, crc_ok in scan(buf, size):
            decoded = None
            if not crc_ok:
                problems.append(f"byte {pos}: batch at offset {header.base_offset} fails its crc")
            elif records:
                try:
                    decoded = decode_batch(
                        buf, pos, verify_crc=False, max_decompressed_bytes=MAX_DECOMPRESSED_BYTES
                    )[1]
                except CorruptBatchError as exc:
                    raise Damage(pos, str(exc)) from exc
            out.batch(pos, header, crc_ok, decoded)
            batches += 1
            count += header.records_count
            end = pos + header.size
    except Damage as damage:
        out.finish(batches, count, end, size)
        print(f"klog dump-log: valid data ends at {damage}", file=sys.stderr)
        for problem in problems:
            print(f"klog dump-log: {problem}", file=sys.stderr)
        return 1
    out.finish(batches, count, end, size)
    for problem in problems:
        print(f"klog dump-log: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _usage_error(message: str) -> int:
    print(f"klog dump-log: {message}", file=sys.stderr)
    return 2


# --- rendering ---------------------------------------------------------------------------------


def batch_fields(pos: int, header: BatchHeader, crc_ok: bool) -> dict:
    """A batch as plain data, the same fields in every output format."""
    last_sequence = -1
    if header.base_sequence >= 0:
        last_sequence = (header.base_sequence + header.last_offset_delta) & 0x7FFFFFFF
    return {
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "position": pos,
        "size": header.size,
        "count": header.records_count,
        "base_timestamp": header.base_timestamp,
        "max_timestamp": header.max_timestamp,
        "timestamp_type": "LogAppendTime" if header.log_append_time else "CreateTime",
        "codec": CODEC_NAMES.get(header.codec, f"unknown({header.codec})"),
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "last_sequence": last_sequence,
        "partition_leader_epoch": header.partition_leader_epoch,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "crc": header.crc,
        "crc_valid": crc_ok,
    }


def show_bytes(data: bytes | None) -> str:
    """UTF-8 text when it decodes and prints cleanly, else the bytes' repr; None as null."""
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return repr(data)
    return text if text.isprintable() else repr(data)


def _json_bytes(data: bytes | None):
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _marker(header: BatchHeader, record: Record) -> str | None:
    """A control record as Kafka prints it (``endTxnMarker: COMMIT``), else None."""
    if not header.is_control:
        return None
    try:
        kind = control_type(record)
    except CorruptBatchError:
        return "endTxnMarker: unreadable"
    return "endTxnMarker: " + ("COMMIT" if kind == CONTROL_COMMIT else "ABORT")


def summary(batches: int, records: int, end: int, size: int) -> str:
    return f"{batches} batches, {records} records in bytes 0..{end} of {size}"


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


class _PlainOut:
    """Kafka's kafka-dump-log.sh lines: ``key: value`` pairs, one batch or record a line."""

    def start(self, path: Path, base_offset: int) -> None:
        print(f"Dumping {path}")
        print(f"Starting offset: {base_offset}")

    def batch(self, pos, header, crc_ok, records) -> None:
        f = batch_fields(pos, header, crc_ok)
        print(
            f"baseOffset: {f['base_offset']} lastOffset: {f['last_offset']} count: {f['count']} "
            f"baseSequence: {f['base_sequence']} lastSequence: {f['last_sequence']} "
            f"producerId: {f['producer_id']} producerEpoch: {f['producer_epoch']} "
            f"partitionLeaderEpoch: {f['partition_leader_epoch']} "
            f"isTransactional: {str(f['is_transactional']).lower()} "
            f"isControl: {str(f['is_control']).lower()} position: {pos} "
            f"baseTimestamp: {f['base_timestamp']} {f['timestamp_type']}: {f['max_timestamp']} "
            f"size: {f['size']} magic: 2 compresscodec: {f['codec']} crc: {f['crc']} "
            f"isvalid: {str(crc_ok).lower()}"
        )
        for record in records or ():
            marker = _marker(header, record)
            data = marker or f"key: {show_bytes(record.key)} payload: {show_bytes(record.value)}"
            headers = ", ".join(f"{k}={show_bytes(v)}" for k, v in record.headers)
            print(
                f"| offset: {record.offset} {f['timestamp_type']}: {record.timestamp} "
                f"headers: [{headers}] {data}"
            )

    def finish(self, batches: int, records: int, end: int, size: int) -> None:
        print(summary(batches, records, end, size))


class _JsonOut:
    """One JSON object per batch per line (orjson); records inline with ``--records``."""

    def start(self, path: Path, base_offset: int) -> None:
        pass

    def batch(self, pos, header, crc_ok, records) -> None:
        fields = batch_fields(pos, header, crc_ok)
        if records is not None:
            fields["records"] = [
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": _json_bytes(r.key),
                    "value": _json_bytes(r.value),
                    "headers": [[k, _json_bytes(v)] for k, v in r.headers],
                }
                for r in records
            ]
        sys.stdout.buffer.write(orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE))

    def finish(self, batches: int, records: int, end: int, size: int) -> None:
        sys.stdout.flush()


class _RichOut:
    """For a person at a terminal: a table of batches, or each batch's line and its records."""

    COLUMNS = ("offsets", "position", "size", "count", "timestamps", "codec", "producer", "flags")

    def __init__(self):
        self.console = Console(highlight=False)
        self.table: Table | None = None

    def start(self, path: Path, base_offset: int) -> None:
        self.console.print(Text(f"{path}  base offset {base_offset}", style="bold"))

    def batch(self, pos, header, crc_ok, records) -> None:
        f = batch_fields(pos, header, crc_ok)
        flags = " ".join(
            n for n, on in (("txn", f["is_transactional"]), ("control", f["is_control"])) if on
        )
        crc = Text("crc ok", style="green") if crc_ok else Text("CRC BAD", style="bold red")
        row = (
            f"{f['base_offset']}..{f['last_offset']}",
            str(pos),
            str(f["size"]),
            str(f["count"]),
            f"{_iso(f['base_timestamp'])} .. {_iso(f['max_timestamp'])} {f['timestamp_type']}",
            f["codec"],
            f"{f['producer_id']}/{f['producer_epoch']}/{f['base_sequence']}",
            flags or "-",
        )
        if records is None:
            if self.table is None:
                self.table = Table(header_style="bold cyan")
                for name in (*self.COLUMNS, "crc"):
                    right = name in ("position", "size", "count")
                    self.table.add_column(name, justify="right" if right else "left")
            self.table.add_row(*row, crc)
            if self.table.row_count >= TABLE_ROWS:
                self._flush()
            return
        line = Text(" ".join(f"{n} {v}" for n, v in zip(self.COLUMNS, row)) + " ", style="bold")
        self.console.print(line + crc)
        if records:
            self._records(header, records)

    def _records(self, header, records) -> None:
        table = Table(header_style="dim", box=None, padding=(0, 1, 0, 2))
        for name in ("offset", "timestamp", "key", "value", "headers"):
            table.add_column(name, overflow="fold")
        for r in records:  # record data as Text: never parsed as rich markup
            marker = _marker(header, r)
            table.add_row(
                str(r.offset),
                str(r.timestamp),
                Text(show_bytes(r.key)),
                Text(marker or show_bytes(r.value)),
                Text(", ".join(f"{k}={show_bytes(v)}" for k, v in r.headers)),
            )
        self.console.print(table)

    def _flush(self) -> None:
        if self.table is not None and self.table.row_count:
            self.console.print(self.table)
        self.table = None

    def finish(self, batches: int, records: int, end: int, size: int) -> None:
        self._flush()
        self.console.print(summary(batches, records, end, size))
