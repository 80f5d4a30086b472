"""The binary layout of the appliance's shared-memory region: structs, offsets and sizes.

Pure data: no mmap, no posix_ipc. Every integer is little-endian (``<``, no implicit padding);
every section starts on a 64-byte line so that two writers never share a cache line, and every
entry a writer updates begins with its own u64 sequence number (see ``seqlock``).

Region map (``Geometry`` computes the offsets; W = max_workers, P = max_partitions,
K = index_entries)::

    0                    header page (4096 bytes; 128 used)
    workers_offset       W worker slots          WORKER_SLOT_BYTES (448) each
    partitions_offset    P partition slots       partition_slot_bytes each (page-aligned start)
    out_offset           W fetch-out tables      out_table_bytes each (page-aligned start)
    metrics_offset       W metrics areas         METRICS_AREA_BYTES (256 KiB) each

    total_bytes = page_up(page_up(page_up(4096 + 448 W) + P (320 + line_up(96 + 8 K)))
                          + W line_up(64 + 24 P)) + W 262144

    W=16, P=16384, K=64 (the defaults):  25.0 MiB      W=4,  P=4096,  K=64:  5.1 MiB
    W=16, P=65536, K=64:                 88.0 MiB      W=64, P=65536, K=64:  172 MiB
    Docker's default /dev/shm is 64 MB: size P to the appliance (creation fails cleanly with
    the figure when /dev/shm is too small; it never SIGBUSes later, see ``region``).

Who writes what (single writer per seqlocked entry):

    header                     the supervisor, once, before anyone attaches; then `generation`
    worker slot, static part   the supervisor (pid, port, state, restarts, log dir)
    worker slot, live part     that worker (heartbeat, reported state, cumulative counters)
    worker slot, publications  that worker (a counter bumped after each partition publish)
    partition directory part   the supervisor (alloc/free: in_use, topic, partition, owner)
    partition log part         the owner worker (offsets, sizes, counters, hot index ring);
                               the supervisor only inside alloc, before any owner exists
    fetch-out table of worker w  worker w (bytes/records it served, one cell per partition slot)
    metrics area of worker w     worker w (its statistics and consumer-lag report, ~2 per second)

Versioning: ``LAYOUT_VERSION`` changes with any change below. The first 56 bytes of the header
(magic, version, sizes, supervisor pid and start ticks) keep their offsets forever, so a newer
klog can still tell whether an older region's supervisor is alive.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = b"KLOGSHM\x01"
MAGIC_PREFIX = b"KLOGSHM"  # what every version's magic starts with
LAYOUT_VERSION = 4  # 2: the per-worker metrics areas; 3: last stable offset, aborted txns;
#                     4: the workers' publication counters
PAGE = 4096
LINE = 64
SEQ = struct.Struct("<Q")  # the u64 sequence opening every seqlocked entry (seqlock.load/store
#                           access it atomically; this Struct is for sizes and combined formats)
SEQ_BYTES = SEQ.size
NAME_FIELD_BYTES = 256  # topic names (Kafka: <= 249 ASCII chars) and log dir paths


def line_up(n: int) -> int:
    return -(-n // LINE) * LINE


def page_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


# -- header (offset 0) ---------------------------------------------------------------------------

HEADER = struct.Struct(
    "<"
    "8s"  # 0   magic                  MAGIC; written last at creation: valid magic = full header
    "I"   # 8   layout_version         LAYOUT_VERSION; attach refuses any other
    "I"   # 12  header_bytes           PAGE: the header page
    "Q"   # 16  total_bytes            size of the region; equals the shm object's size
    "I"   # 24  max_workers            W
    "I"   # 28  max_partitions         P
    "I"   # 32  index_entries          K: hot offset-index entries kept per partition
    "i"   # 36  broker_id              from the config (broker.id)
    "i"   # 40  supervisor_pid         the creator; a stale region has a dead one
    "I"   # 44  (padding)
    "Q"   # 48  supervisor_start_ticks /proc/<pid>/stat starttime: a recycled pid differs
    "q"   # 56  created_at_ms          wall clock at creation
)
HEADER_BYTES = PAGE
GENERATION_OFFSET = 64  # u64, own line; the supervisor bumps it after every partition alloc/free
PID_OFFSET = 40
assert HEADER.size == 64


class Header(NamedTuple):
    magic: bytes
    layout_version: int
    header_bytes: int
    total_bytes: int
    max_workers: int
    max_partitions: int
    index_entries: int
    broker_id: int
    supervisor_pid: int
    supervisor_start_ticks: int
    created_at_ms: int


def read_header(buf) -> Header:
    f = HEADER.unpack_from(buf, 0)
    return Header(*f[:9], f[10], f[11])  # f[9] is padding


def write_header(buf, header: Header) -> None:
    """Writes every field, then the magic last (an attacher refuses a region without it)."""
    HEADER.pack_into(buf, 0, b"\0" * 8, *header[1:9], 0, *header[9:])
    buf[0:8] = header.magic


# -- worker slot (workers_offset + W * 448) ------------------------------------------------------

class WorkerState(enum.IntEnum):
    """A worker's life cycle; EMPTY (0) is what a fresh region holds."""

    EMPTY = 0     # no worker for this index
    STARTING = 1  # forked (or about to be); not serving yet
    SERVING = 2   # listening and answering requests (reported by the worker)
    STOPPING = 3  # graceful stop under way (reported by the worker or set by the supervisor)
    DEAD = 4      # exited or killed; the supervisor will restart it after a backoff
    FAILED = 5    # its disk failed or it cannot boot: stays offline


WORKER_STATIC = struct.Struct(  # after the part's seq; written by the supervisor
    "<"
    "i"     # 8   index             the slot number (sanity)
    "i"     # 12  pid               the current incarnation (0 before the first fork)
    "i"     # 16  port              port + index
    "I"     # 20  state             WorkerState, as the supervisor knows it
    "I"     # 24  restarts          restarts so far
    "H"     # 28  log_dir_len       bytes used in log_dir
    "2x"    # 30  (padding)
    "q"     # 32  started_at_ms     wall clock of the last fork (0 = never)
    "256s"  # 40  log_dir           UTF-8 absolute path, NUL padded
)
WORKER_STATIC_BYTES = line_up(SEQ_BYTES + WORKER_STATIC.size)  # 320
WORKER_LIVE = struct.Struct(  # after the part's seq; written by the worker itself
    "<"
    "i"  # 8   pid            the writer's pid: tells this incarnation from the previous one
    "I"  # 12  reported_state WorkerState the worker reports (STARTING/SERVING/STOPPING)
    "q"  # 16  heartbeat_ms   wall clock, bumped ~every second; stale = the supervisor kills it
    "Q"  # 24  bytes_in       cumulative: produced record bytes appended
    "Q"  # 32  records_in     cumulative: produced records appended
    "Q"  # 40  bytes_out      cumulative: record bytes served by Fetch
    "Q"  # 48  records_out    cumulative: records served by Fetch (batch record counts)
    "Q"  # 56  requests       cumulative: requests answered
)
WORKER_LIVE_OFFSET = WORKER_STATIC_BYTES
WORKER_LIVE_BYTES = line_up(SEQ_BYTES + WORKER_LIVE.size)  # 64
# A u64 on a line of its own, no seqlock: the worker bumps it after each publish of one of its
# partitions' log parts, so that another worker watching many of them for appends can tell
# in one load per worker that none was written (worker.py).
WORKER_PUBLISHED_OFFSET = WORKER_STATIC_BYTES + WORKER_LIVE_BYTES  # 384
WORKER_SLOT_BYTES = WORKER_PUBLISHED_OFFSET + LINE  # 448

# -- partition slot (partitions_offset + P * partition_slot_bytes) -------------------------------

PARTITION_DIR = struct.Struct(  # after the part's seq; written by the supervisor
    "<"
    "I"     # 8   epoch       bumped on every allocation of this slot; the log part copies it
    "B"     # 12  in_use      1 while a partition holds the slot
    "x"     # 13  (padding)
    "H"     # 14  topic_len   bytes used in topic
    "i"     # 16  partition   partition number
    "i"     # 20  owner       worker index, the only writer of the log part
    "256s"  # 24  topic       UTF-8, NUL padded
)
PARTITION_DIR_BYTES = line_up(SEQ_BYTES + PARTITION_DIR.size)  # 320
PARTITION_LOG = struct.Struct(  # after the part's seq; written by the owner
    "<"
    "I"  # 8   epoch                       the slot's epoch at allocation (readers compare)
    "I"  # 12  index_total                 hot entries appended since the active segment began
    "q"  # 16  log_start_offset            -1 until the owner first publishes
    "q"  # 24  high_watermark              what consumers may read
    "q"  # 32  log_end_offset
    "q"  # 40  active_segment_base_offset  the ring's offsets are relative to this
    "q"  # 48  active_segment_bytes        valid bytes in the active segment
    "q"  # 56  size_bytes                  the whole log
    "Q"  # 64  records_in                  cumulative records appended
    "Q"  # 72  bytes_in                    cumulative bytes appended
    "q"  # 80  last_stable_offset          what read_committed consumers may read (KIP-98)
    "Q"  # 88  aborted_txns                aborted transactions indexed (0: no .txnindex)
)
PARTITION_LOG_PUBLISH = struct.Struct("<I6q2QqQ")  # the same fields from index_total on (+12)
PARTITION_LOG_HEAD = SEQ_BYTES + PARTITION_LOG.size  # 96: the ring starts here
INDEX_ENTRY = struct.Struct(
    "<"
    "I"  # relative offset   offset - active_segment_base_offset (Kafka's .index key)
    "I"  # position          byte position in the active segment
)
# The ring: entry n (0-based, n < index_total) lives at (n % K); the newest is index_total - 1;
# min(index_total, K) are valid. index_total <= K means the ring holds the whole segment.

# -- fetch-out table of one worker (out_offset + w * out_table_bytes) ----------------------------
# A 64-byte line holding the table's seq, then one cell per partition slot.
OUT_CELL = struct.Struct(
    "<"
    "Q"  # epoch        the partition slot's epoch when counted (older epoch = another partition)
    "Q"  # bytes_out    record bytes this worker served from the partition
    "Q"  # records_out  records this worker served from the partition
)
OUT_TABLE_HEAD = LINE

# -- metrics area of one worker (metrics_offset + w * METRICS_AREA_BYTES) ------------------------
# One seqlocked entry: the sequence, this head, then `length` bytes of an orjson document (the
# worker's statistics and lag report; `appliance.shm.metrics_area` documents its keys). A
# document is rewritten whole, so one sequence guards it all; readers copy it and decode.
METRICS_AREA_BYTES = 256 * 1024
METRICS_HEAD = struct.Struct(
    "<"
    "i"  # 8   pid          the writer: a document of an earlier incarnation is told apart
    "I"  # 12  length       bytes of the document that follow the head
    "q"  # 16  updated_ms   wall clock of the write
)
METRICS_DOCUMENT_OFFSET = SEQ_BYTES + METRICS_HEAD.size  # 24
METRICS_DOCUMENT_MAX_BYTES = METRICS_AREA_BYTES - METRICS_DOCUMENT_OFFSET


@dataclass(frozen=True)
class Geometry:
    """The sizes of one region; every offset follows from these three numbers."""

    max_workers: int = 16
    max_partitions: int = 16384
    index_entries: int = 64

    def __post_init__(self):
        for name, low, high in (("max_workers", 1, 4096), ("max_partitions", 1, 1 << 22),
                                ("index_entries", 1, 1 << 16)):
            value = getattr(self, name)
            if not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value}")

    @property
    def partition_log_bytes(self) -> int:
        return line_up(PARTITION_LOG_HEAD + INDEX_ENTRY.size * self.index_entries)

    @property
    def partition_slot_bytes(self) -> int:
        return PARTITION_DIR_BYTES + self.partition_log_bytes

    @property
    def out_table_bytes(self) -> int:
        return line_up(OUT_TABLE_HEAD + OUT_CELL.size * self.max_partitions)

    @property
    def workers_offset(self) -> int:
        return HEADER_BYTES

    @property
    def partitions_offset(self) -> int:
        return page_up(self.workers_offset + WORKER_SLOT_BYTES * self.max_workers)

    @property
    def out_offset(self) -> int:
        return page_up(self.partitions_offset + self.partition_slot_bytes * self.max_partitions)

    @property
    def metrics_offset(self) -> int:
        return page_up(self.out_offset + self.out_table_bytes * self.max_workers)

    @property
    def total_bytes(self) -> int:
        return self.metrics_offset + METRICS_AREA_BYTES * self.max_workers

    def metrics_area(self, worker: int) -> int:
        if not 0 <= worker < self.max_workers:
            raise IndexError(f"worker index {worker} out of range [0, {self.max_workers})")
        return self.metrics_offset + METRICS_AREA_BYTES * worker

    def worker_slot(self, index: int) -> int:
        """Offset of worker slot ``index`` (its static part; the live part follows)."""
        if not 0 <= index < self.max_workers:
            raise IndexError(f"worker index {index} out of range [0, {self.max_workers})")
        return self.workers_offset + WORKER_SLOT_BYTES * index

    def partition_slot(self, slot: int) -> int:
        """Offset of partition slot ``slot`` (its directory part; the log part follows)."""
        if not 0 <= slot < self.max_partitions:
            raise IndexError(f"partition slot {slot} out of range [0, {self.max_partitions})")
        return self.partitions_offset + self.partition_slot_bytes * slot

    def out_table(self, worker: int) -> int:
        if not 0 <= worker < self.max_workers:
            raise IndexError(f"worker index {worker} out of range [0, {self.max_workers})")
        return self.out_offset + self.out_table_bytes * worker

    @classmethod
    def of(cls, header: Header) -> Geometry:
        return cls(header.max_workers, header.max_partitions, header.index_entries)


def encode_name(text: str, what: str) -> bytes:
    """UTF-8 bytes for a fixed 256-byte field; ValueError if they do not fit."""
    raw = text.encode()
    if len(raw) > NAME_FIELD_BYTES:
        raise ValueError(f"{what} is {len(raw)} UTF-8 bytes; the field holds {NAME_FIELD_BYTES}")
    return raw


def decode_name(raw: bytes, length: int) -> str:
    return raw[:length].decode(errors="replace")
