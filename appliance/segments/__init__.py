"""The storage engine: partition logs of segment files (Kafka's on-disk layout).

Public API::

    log = PartitionLog.open(directory, LogConfig(...), now_ms=...)  # .recovery: the report
    info = log.append(records, now_ms=...)    # AppendInfo(base_offset, last_offset, ...)
    piece = log.read(offset, max_bytes)       # ReadSlice(fd, position, length, ...): sendfile
    log.offset_for_timestamp(ts_ms)           # (offset, timestamp) | None
    synced = committer.durable(log, info.last_offset)  # on the loop: None if durable already,
    await synced                              # else an asyncio Future resolved once durable
    numbers = log.snapshot()                  # LogSnapshot: what the owner publishes (shm)

    # another process, from the directory and the published numbers only:
    reader = PartitionReader(directory)
    piece = reader.read(offset, max_bytes, **numbers._asdict(), hint=None)  # == log.read
    # a restarted owner, on the numbers its predecessor published:
    log = PartitionLog.open(directory, config, now_ms=..., attach=numbers.attach_point())

Modules: ``config`` (LogConfig), ``errors``, ``layout`` (file names, partition.state,
partition_dir), ``index`` (offset and time indexes), ``segment`` (one segment, the append
path), ``lookup``, ``recovery_scan`` (finding a segment's valid end, reports),
``segment_repair`` (recovery depths, index rebuilds, truncation), ``log_loader``, ``policy``
(pure roll, retention and flush decisions), ``validation`` (checking an append),
``segment_list``, ``log`` (PartitionLog), ``log_reads`` (its read methods), ``retention``,
``group_commit``, ``leader_epochs``, ``checkpoint_file`` (Kafka's checkpoint text format),
``faults``, ``attach`` (opening on published numbers), ``readable``
(ReadableLog: what a Fetch reads, owned or not), ``read_only_segment`` and
``non_owner_reader`` (PartitionReader: reads by a process that is not the owner).
"""

from .attach import AttachPoint
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
from .log import EMPTY_SLICE, AppendInfo, BatchPosition, LogSnapshot, PartitionLog, ReadSlice
from .non_owner_reader import PartitionReader, ReaderStatistics
from .recovery_scan import RecoveryReport, SegmentRecovery

__all__ = [
    "EMPTY_SLICE",
    "AppendInfo",
    "AttachPoint",
    "BatchPosition",
    "CorruptRecordError",
    "GroupCommitStatistics",
    "GroupCommitter",
    "LogClosedError",
    "LogConfig",
    "LogSnapshot",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "PartitionReader",
    "ReadSlice",
    "ReaderStatistics",
    "RecordTooLargeError",
    "RecoveryReport",
    "SegmentRecovery",
    "StorageError",
    "partition_dir",
]
