"""A producer batch: the records of one partition that travel, succeed or fail together.

The user thread appends ``(timestamp_ms, key, value, headers)`` tuples (``send``), or whole
*segments* ``(timestamp_ms, key, values, headers)`` that share everything but the value
(``send_batch``: no tuple per record until encoding, when they are short-lived). The sender
stamps the idempotent producer's id, epoch and base sequence and encodes the whole batch at
once with the codec's ``build_batch`` (one tight loop over the records, not a call each).
The encoded bytes are kept, so a retry resends exactly the same bytes: the broker recognizes
a duplicate by (producer id, epoch, base sequence, count).

``future`` is the I/O flavour's future (``concurrent.futures.Future`` or an asyncio one), made
by the factory the flavour hands the accumulator; this package never calls it. It resolves to
``(base_offset, log_append_time_ms, log_start_offset)`` or to an exception.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from klog.protocol import records_codec
from klog.protocol.records import build_batch
from klog.protocol.records_encode import CREATE_TIME, assemble_pieces, batch_attributes

if records_codec.IMPLEMENTATION == "C":  # KLOG_PURE_PYTHON=1 or not built: the tuples' path
    from klog.protocol._recordsc import encode_segments as _encode_segments
else:
    _encode_segments = None


class ProducerBatch:
    __slots__ = ("topic", "partition", "records", "size", "created_ms", "deadline_ms",
                 "future", "attempts", "producer_id", "producer_epoch", "base_sequence",
                 "data", "retry_at_ms", "done", "sealed", "segments", "segment_count",
                 "transactional", "leader_epoch")

    def __init__(self, topic: str, partition: int, created_ms: int, deadline_ms: int,
                 future: Any):
        self.topic = topic
        self.partition = partition
        self.records: list[tuple] = []
        self.segments: list[tuple] | None = None  # send_batch values, after the records
        self.segment_count = 0
        self.size = 0  # estimated bytes, for batch_size and buffer_memory
        self.created_ms = created_ms
        self.deadline_ms = deadline_ms  # delivery timeout
        self.future = future
        self.attempts = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1  # -1: not stamped yet
        self.data: bytes | tuple[bytes, bytes] | None = None
        self.retry_at_ms = 0
        self.leader_epoch = -1  # the partition's leader epoch when last sent (-1: unknown)
        self.done = False
        self.sealed = False  # no more records: queued for the sender
        self.transactional = False  # part of a transaction (the batch attribute bit)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def count(self) -> int:
        return len(self.records) + self.segment_count

    def add_segment(self, timestamp_ms: int, key, values, headers) -> int:
        """Append values sharing the rest; returns the index of the first."""
        first = len(self.records) + self.segment_count
        if self.segments is None:
            self.segments = []
        self.segments.append((timestamp_ms, key, values, headers))
        self.segment_count += len(values)
        return first

    def materialize(self) -> None:
        """Turn the segments into record tuples (when send() adds to a batch that has them,
        so that the order of appends is the order of offsets)."""
        if self.segments:
            self.records = self._all_records()
        self.segments = None
        self.segment_count = 0

    def _all_records(self) -> list[tuple]:
        if not self.segments:
            return self.records
        records = list(self.records)
        extend = records.extend
        for timestamp_ms, key, values, headers in self.segments:
            extend(zip(repeat(timestamp_ms), repeat(key), values, repeat(headers)))
        return records  # short-lived when encoding: the garbage collector never sees them

    def stamp(self, producer_id: int, producer_epoch: int, base_sequence: int,
              transactional: bool = False) -> None:
        """Give the batch its idempotent identity; once, before the first encoding."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence = base_sequence
        self.transactional = transactional

    def encode(self, codec: int) -> bytes | tuple[bytes, bytes]:
        """The batch's bytes (encoded on the first call, the same bytes on a retry), as the
        Produce request's records field takes them: one ``bytes``, or the header and the
        body apart when the compiled encoder made the body (see ``assemble_pieces``)."""
        if self.data is None:
            if self.segments and _encode_segments is not None:
                self.data = self._encode_segments(codec)
            if self.data is None:
                self.data = build_batch(self._all_records(), codec=codec,
                                        producer_id=self.producer_id,
                                        producer_epoch=self.producer_epoch,
                                        base_sequence=self.base_sequence,
                                        is_transactional=self.transactional)
        return self.data

    def _encode_segments(self, codec: int) -> tuple[bytes, bytes] | None:
        """The bytes build_batch would make of ``_all_records()`` (header and body apart),
        from the segments as they are (the compiled ``encode_segments``: no tuple per value),
        or None for a shape it leaves to build_batch (headers, a value not bytes)."""
        records, segments = self.records, self.segments
        base_ts = records[0][0] if records else segments[0][0]
        out = _encode_segments(records, segments, base_ts)
        if out is None:
            return None
        body, max_ts = out
        return assemble_pieces(
            [body], len(records) + self.segment_count,
            attributes=batch_attributes(codec, CREATE_TIME, self.transactional, False),
            base_offset=0, partition_leader_epoch=-1, base_ts=base_ts, max_ts=max_ts,
            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence)

    def timestamp_of(self, index: int) -> int:
        if index < len(self.records):
            return self.records[index][0]
        index -= len(self.records)
        for timestamp_ms, _, values, _ in self.segments or ():
            if index < len(values):
                return timestamp_ms
            index -= len(values)
        raise IndexError(f"no record {index} in {self!r}")

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}[{self.partition}], {self.count} records, "
                f"seq {self.base_sequence}, attempt {self.attempts})")
