"""The storage engine: partition logs of segment files (Kafka's on-disk layout).

Public API::

    log = PartitionLog.open(directory, LogConfig(...), now_ms=...)  # .recovery: the report
    info = log.append(records, now_ms=...)    # AppendInfo(base_offset, last_offset, ...)
    piece = log.read(offset, max_bytes)       # ReadSlice(fd, position, length, ...): sendfile
    log.offset_for_timestamp(ts_ms)           # (offset, timestamp) | None
    GroupCommitter().request(log, info.last_offset)  # Future: resolved once durable

Modules: ``config`` (LogConfig), ``errors``, ``layout`` (file names, partition.state),
``index`` (offset and time indexes), ``segment`` (one segment, the append path), ``lookup``,
``recovery`` (validation scan, reports), ``repair``, ``log_loader``, ``policy`` (pure roll,
retention and flush decisions), ``validation`` (checking an append), ``segment_list``,
``log`` (PartitionLog), ``group_commit``, ``faults``.
"""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from .group_commit import GroupCommitStatistics, GroupCommitter
from .layout import partition_dir
from .log import EMPTY_SLICE, AppendInfo, BatchPosition, PartitionLog, ReadSlice
from .recovery import RecoveryReport, SegmentRecovery

__all__ = [
    "EMPTY_SLICE",
    "AppendInfo",
    "BatchPosition",
    "CorruptRecordError",
    "GroupCommitStatistics",
    "GroupCommitter",
    "LogClosedError",
    "LogConfig",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "ReadSlice",
    "RecordTooLargeError",
    "RecoveryReport",
    "SegmentRecovery",
    "StorageError",
    "partition_dir",
]
