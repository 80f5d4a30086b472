"""Record batches decoded straight into columns: no Python object per record.

For readers that want arrays, not records (the pipeline's Arrow tables): the records of many
batches land in one :class:`RecordColumns`, whose buffers have Apache Arrow's layouts, so a
reader wraps them without a copy (``pyarrow.Array.from_buffers``): ``offsets`` and
``timestamps`` are int64 arrays; keys and values are ``large_binary`` arrays (int64 end
offsets starting with 0, the bytes, and a validity byte per record, 1 = not null, that
``numpy.packbits(..., bitorder="little")`` turns into Arrow's bitmap). Headers, rare in log
pipelines, stay Python lists: ``headers[i]`` is None for a record without any.
``timestamp_types`` has a byte per record, 0 CreateTime or 1 LogAppendTime, filled per batch.

The compiled codec appends a whole batch in one call; the pure path decodes records with the
reference decoder and appends them, and is what the compiled one is tested against. Integers
are the machine's byte order (little-endian on every platform we run).

What can fail: CorruptBatchError, as :func:`klog.protocol.records.decode_batches` raises it;
the batches before the bad one stay appended. ``MemoryError`` in the compiled path may leave a
batch half appended.
"""

from __future__ import annotations

from array import array

from klog.protocol.record_batch import TIMESTAMP_TYPE_BIT, CorruptBatchError
from klog.protocol.records import in_batch, records_section, whole_batches
from klog.protocol.records_codec import compiled_columns
from klog.protocol.records_decode import Record, decode_records

__all__ = ["RecordColumns", "append_records", "decode_into_columns"]

_ZERO = bytes(8)  # the first Arrow offset


class RecordColumns:
    """Columns of decoded records; see the module docstring for the layouts."""

    __slots__ = ("offsets", "timestamps", "key_offsets", "keys", "key_valid",
                 "value_offsets", "values", "value_valid", "headers", "timestamp_types")

    def __init__(self):
        self.offsets = bytearray()
        self.timestamps = bytearray()
        self.key_offsets = bytearray(_ZERO)
        self.keys = bytearray()
        self.key_valid = bytearray()
        self.value_offsets = bytearray(_ZERO)
        self.values = bytearray()
        self.value_valid = bytearray()
        self.headers: list[list[tuple[str, bytes | None]] | None] = []
        self.timestamp_types = bytearray()  # not the compiled decoder's: filled per batch

    def __len__(self) -> int:
        return len(self.headers)

    def buffers(self) -> tuple:
        """The eight byte buffers and the headers list, in the compiled decoder's order."""
        return (self.offsets, self.timestamps, self.key_offsets, self.keys, self.key_valid,
                self.value_offsets, self.values, self.value_valid, self.headers)

    def records(self) -> list[Record]:
        """The records back as tuples (tests, small tools): the slow way round."""
        offsets, timestamps = array("q", self.offsets), array("q", self.timestamps)
        return [
            Record(offsets[i], timestamps[i], _cell(self.keys, self.key_offsets, self.key_valid, i),
                   _cell(self.values, self.value_offsets, self.value_valid, i),
                   self.headers[i] or [])
            for i in range(len(self))
        ]


def _cell(data: bytearray, offsets: bytearray, valid: bytearray, i: int) -> bytes | None:
    if not valid[i]:
        return None
    start, end = array("q", offsets[8 * i : 8 * i + 16])
    return bytes(data[start:end])


def append_records(columns: RecordColumns, records: list[Record],
                   timestamp_type: int = 0) -> None:
    """The pure path: append decoded records (the reference the compiled decoder matches)."""
    columns.timestamp_types += bytes([timestamp_type]) * len(records)
    columns.offsets += array("q", [r.offset for r in records]).tobytes()
    columns.timestamps += array("q", [r.timestamp for r in records]).tobytes()
    for field, data, ends, valid in ((2, columns.keys, columns.key_offsets, columns.key_valid),
                                     (3, columns.values, columns.value_offsets,
                                      columns.value_valid)):
        end = array("q", ends[-8:])[0]
        new_ends = array("q")
        for record in records:
            cell = record[field]
            if cell is not None:
                data += cell
                end += len(cell)
            new_ends.append(end)
            valid.append(cell is not None)
        ends += new_ends.tobytes()
    columns.headers.extend(r.headers or None for r in records)


def _append_section(columns: RecordColumns, data: bytes, start: int, end: int, count: int,
                    base_offset: int, base_ts: int, timestamp_type: int) -> None:
    if compiled_columns is not None:
        first = len(columns)
        if compiled_columns(data, start, end, count, base_offset, base_ts, *columns.buffers()):
            columns.timestamp_types += bytes([timestamp_type]) * (len(columns) - first)
            return
    append_records(columns, decode_records(data, start, end, count, base_offset, base_ts),
                   timestamp_type)


def decode_into_columns(
    buf, columns: RecordColumns, *, verify_crc: bool = True, skip_control: bool = True,
    max_decompressed_bytes: int | None = None, from_offset: int = -1,
) -> int:
    """Append the records of the whole batches of ``buf`` to ``columns``; return how many.

    As :func:`~klog.protocol.records.decode_batches`, but control batches are skipped by
    default (a reader of data wants none), LogAppendTime batches give every record the
    batch's max_timestamp, and records below ``from_offset`` are left out (a fetch from the
    middle of a batch: that one batch takes the pure path, record by record; the others are
    appended whole). Raises CorruptBatchError at the first bad batch.
    """
    before = len(columns)
    for pos, header in whole_batches(buf, verify_crc=verify_crc, skip_control=skip_control):
        if header.last_offset < from_offset:
            continue
        data, start, end = records_section(buf, pos, header, max_decompressed_bytes)
        first = len(columns)
        timestamp_type = 1 if header.attributes & TIMESTAMP_TYPE_BIT else 0
        try:
            if header.base_offset < from_offset:
                records = decode_records(data, start, end, header.records_count,
                                         header.base_offset, header.base_timestamp)
                append_records(columns, [r for r in records if r.offset >= from_offset],
                               timestamp_type)
            else:
                _append_section(columns, data, start, end, header.records_count,
                                header.base_offset, header.base_timestamp, timestamp_type)
        except CorruptBatchError as exc:
            raise in_batch(exc, pos, header) from exc
        if timestamp_type:
            count = len(columns) - first
            columns.timestamps[8 * first :] = array("q", [header.max_timestamp] * count).tobytes()
    return len(columns) - before
