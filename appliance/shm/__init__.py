"""The appliance's shared-memory index: one POSIX shared-memory region per appliance.

It owns the partition directory (owner, log start offset, high watermark, log end offset,
active segment), the hot part of each partition's offset index, the workers' slots (pid,
port, state, heartbeat, counters) and per-worker fetch-out counters, in the fixed binary
layout of ``layout``. Rules: every entry has a single writer (the supervisor for what it
decides, a worker for what it does) and readers use the seqlock of ``seqlock``, so nobody
ever waits on a lock a dead process could hold and no reader ever sees a torn entry. It
imports nothing else of klog's.

Modules: ``layout`` (structs, offsets, sizes, with the size formula), ``seqlock`` (the
read/write protocol and its fault points), ``partitions``, ``partition_view``, ``workers``
and ``fetch_out`` (typed accessors over any buffer: an mmap, or a bytearray in tests),
``status`` (the snapshot behind `klog status`), ``region`` (posix_ipc: create, attach,
reclaim, unlink), and ``appliance_region`` (the calls the supervisor and workers make).
"""

from .fetch_out import FetchOutTable
from .layout import Geometry, Header, WorkerState
from .partition_table import FreeSlotError, PartitionTable, SlotsFullError
from .partition_view import IndexPosition, PartitionView
from .region import (
    Region,
    RegionError,
    RegionInUseError,
    RegionLayoutError,
    RegionNotFoundError,
    RegionSpaceError,
    attach_region,
    create_region,
    region_name,
    unlink_region,
)
from .seqlock import TornEntryError
from .status import Snapshot
from .worker_table import WorkerTable, WorkerView

__all__ = [
    "FetchOutTable", "FreeSlotError", "Geometry", "Header", "IndexPosition", "PartitionTable",
    "PartitionView", "Region", "RegionError", "RegionInUseError", "RegionLayoutError",
    "RegionNotFoundError", "RegionSpaceError", "SlotsFullError", "Snapshot", "TornEntryError",
    "WorkerState", "WorkerTable", "WorkerView", "attach_region", "create_region", "region_name",
    "unlink_region",
]
