"""The storage engine's errors: whose fault it is, and the numbers that disagree.

- :class:`StorageError`: the disk or the file system failed (ENOSPC, EIO, EROFS, ...). Not the
  client's fault; Kafka answers KAFKA_STORAGE_ERROR (56). The log stays consistent and readable
  after one; a later append retries what failed (a roll, a write).
- :class:`OffsetOutOfRangeError`: the client asked for an offset the log does not hold
  (OFFSET_OUT_OF_RANGE, 1).
- :class:`CorruptRecordError`: a produced batch fails its checks, or a stored one is found damaged
  (CORRUPT_MESSAGE, 2). It is a :class:`CorruptBatchError`, so code that catches the protocol's
  error catches it too.
- :class:`RecordTooLargeError`: a batch exceeds ``max.message.bytes`` (MESSAGE_TOO_LARGE, 10).
- :class:`LogClosedError`: the log was closed or deleted; a programming or shutdown-order error.

Every message names the file or directory and the numbers, so a log line is enough to act on.
"""

from __future__ import annotations

import errno as errno_module
import os
from collections.abc import Iterator
from contextlib import contextmanager

from klog.protocol.record_batch import CorruptBatchError

from . import descriptor_limit


class StorageError(Exception):
    """An operating-system error on a log file, with the errno, the path and what we were doing."""

    kafka_error_code = 56  # KAFKA_STORAGE_ERROR

    def __init__(self, message: str, *, path: str, errno: int | None, operation: str):
        super().__init__(message)
        self.path = path
        self.errno = errno
        self.operation = operation

    @classmethod
    def from_os_error(cls, exc: OSError, *, path: str, operation: str) -> StorageError:
        """Wrap ``exc``; the message reads ``cannot <operation> <path>: [Errno 28] ENOSPC ...``."""
        code = exc.errno
        name = errno_module.errorcode.get(code, "?") if code is not None else "?"
        reason = os.strerror(code) if code is not None else str(exc)
        if code in descriptor_limit.EXHAUSTED:  # name the limit and what to change
            reason = f"{reason}: {descriptor_limit.note(code)}"
        error = cls(
            f"cannot {operation} {path}: [Errno {code}] {name} {reason}",
            path=path,
            errno=code,
            operation=operation,
        )
        error.__cause__ = exc
        return error

    @property
    def disk_full(self) -> bool:
        """True for ENOSPC and EDQUOT: freeing space makes the next append succeed."""
        return self.errno in (errno_module.ENOSPC, errno_module.EDQUOT)

    @property
    def out_of_descriptors(self) -> bool:
        """True for EMFILE and ENFILE: the descriptor limit, not the disk; retriable once
        descriptors are freed or the limit raised."""
        return self.errno in descriptor_limit.EXHAUSTED


class OffsetOutOfRangeError(Exception):
    """``offset`` is below the log start offset or beyond the log end offset."""

    kafka_error_code = 1  # OFFSET_OUT_OF_RANGE

    def __init__(self, *, path: str, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is out of range for {path}: the log holds "
            f"[{log_start_offset}, {log_end_offset})"
        )
        self.path = path
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptRecordError(CorruptBatchError):
    """A batch is malformed or fails its CRC: ``batch_index`` counts from 0 within the request."""

    kafka_error_code = 2  # CORRUPT_MESSAGE

    def __init__(self, message: str, *, path: str = "", position: int = 0, batch_index: int = -1):
        where = f"{path}: " if path else ""
        which = f"batch {batch_index} " if batch_index >= 0 else ""
        super().__init__(f"{where}{which}{message}", position=position)
        self.path = path
        self.batch_index = batch_index


class RecordTooLargeError(Exception):
    """A batch (or a whole append) is larger than a limit. Nothing of the append was written."""

    kafka_error_code = 10  # MESSAGE_TOO_LARGE

    def __init__(self, *, path: str, what: str, size: int, limit: int, setting: str):
        super().__init__(f"{path}: {what} is {size} bytes, above {setting} {limit}")
        self.path = path
        self.size = size
        self.limit = limit
        self.setting = setting


class LogClosedError(Exception):
    """The log was closed or deleted before this call."""

    def __init__(self, path: str):
        super().__init__(f"the log {path} is closed")
        self.path = path


@contextmanager
def storage_errors(path: str, operation: str) -> Iterator[None]:
    """Turn an OSError inside the block into a StorageError naming ``path`` and ``operation``.
    Not for the per-append hot path (it costs a generator); there, catch OSError inline."""
    try:
        yield
    except OSError as exc:
        raise StorageError.from_os_error(exc, path=path, operation=operation) from exc
