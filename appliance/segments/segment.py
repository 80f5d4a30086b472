"""One log segment: a ``.log`` file of record batches plus its offset and time indexes.

States: **active** (the one segment of a log that takes appends) and **sealed** (read-only).
The active ``.log`` is preallocated with ``posix_fallocate`` to ``segment.bytes``, so a full
disk fails when a segment is created (ENOSPC, a clean StorageError, the old segment stays
active) and not in the middle of appends. Sealing trims the file to its real size (Kafka trims
on roll). The logical end of an active file is ``size``; everything after it is zeros, which
recovery relies on (a zeroed header is the end of data).

**The append path is ``os.pwritev``, not a slice write into an mmap**, chosen by measurement
(``perf/bench_mmap_append.py``: 256 MiB of blocks into a fresh fallocated file, ext4, kernel
6.18, 2-vCPU VM; best of 3; each write timed)::

    block    os.write plain    os.pwrite falloc          mmap slice          mmap+POPULATE_WRITE
             MiB/s  p99.9 max  MiB/s  p99.9  max us   MiB/s  p99.9  max us   MiB/s  p99.9  max us
    1 KiB     555    9   299    555     9    276      2244    10   2352      2311     3   2216
    4 KiB     836  134   338   1161    42    226      3787   149   1944      2876   203   2795
    16 KiB   2420   53   404   2830    53    279      3274   617   3106      3395   656   2470
    64 KiB   3551  169   205   5648    69    265      3962   732   2088      4032   696   1964
    1 MiB    4745  405   522   8059   212    217      3912  2749   3241      3598  2342   3111

Throughput of the raw copy favours the map below 16 KiB (1.2-4x; less in other runs: this VM's
figures vary by 2x from run to run, the order did not change at 64 KiB and up), but every
first write into a fresh 2 MiB stretch of the map stalls for 2-3 ms: the kernel fills a whole
large folio (MAP_POPULATE and MADV_POPULATE_WRITE only move the stall; MADV_RANDOM avoids it
but makes every 4 KiB page a fault: 0.2-0.3x). Through ``pwritev`` the tail stays flat (p99.9
under 0.25 ms at every size) and large batches are 1.5-2x faster. Inside the engine the copy
is a small part of an append (CRC, validation and bookkeeping cost 4-8 us in Python), so the
map's gain on small batches shrinks to ~2 us per append while its stalls remain. And a write
that fails returns an errno (a StorageError) where a fault on a mapped page would be SIGBUS.

So an append is one ``pwritev``. From 32 KiB (``COPY_THRESHOLD``) its iovecs are, per batch, a
patched copy of the first 16 bytes (base offset, leader epoch: outside the CRC) and a view of
the rest, so the payload is copied once, by the kernel. Below that the append is copied once
into a bytearray, patched there and written as one piece: 1.8 us instead of 2.9 us for 1 KiB,
equal at 16 KiB, 10% slower at 64 KiB (measured in one run). LogAppendTime rewrites bytes
inside the CRC, so a stamped append always takes the copy (CRC recomputed once per batch).
Only the indexes are mmap'd (see ``index.py``), as in Kafka. Reads use ``os.pread`` of
headers only.

Concurrency: the log's writer thread calls everything except :meth:`flush`, which the group
commit thread may call at any time; ``flush`` only needs the fd, which stays open until the
log closes the segment under its lock. Reads hand out ``(fd, position, length)``; the fd stays
valid until :meth:`close` (deleted segments are closed only after ``file.delete.delay.ms``).
"""

from __future__ import annotations

import contextlib
import os
import threading

from klog.protocol import record_batch as rb

from . import faults
from .config import LogConfig
from .descriptor_cache import CACHE
from .errors import CorruptRecordError, StorageError
from .index import OffsetIndex, TimeIndex
from .layout import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)

_PAGE = 4096
COPY_THRESHOLD = 32 * 1024  # smaller appends: one patched copy, one iovec (see the docstring)
_READ_CHUNK = 8192
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_HEAD = 16  # base offset, batch length, leader epoch: the bytes patched outside the CRC
_ZERO_HEADER = bytes(rb.HEADER_BYTES)
_REOPEN = threading.Lock()  # two threads reopening one evicted segment open it once


class LogSegment:
    """A ``.log`` with its indexes. :meth:`create` makes a new, active one; the constructor
    opens an existing one, which ``repair.recover_segment`` then validates (and activates if it
    is the last). Positions are byte offsets in the ``.log`` file. Raises OSError."""

    def __init__(self, directory: str, base_offset: int, config: LogConfig, *, now_ms: int,
                 name_suffix: str = ""):
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        # "": the live files; ".cleaned": the log cleaner's output (cleaning_swap.py)
        self.name_suffix = name_suffix
        self.path = segment_path(directory, base_offset, LOG_SUFFIX) + name_suffix
        self.size = 0  # logical end of data
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.rolling_base_ms = now_ms
        self.active = False
        self.deleted = False
        self._owns_files = True  # False once a cleaned segment took its names
        self._capacity = 0  # bytes preallocated while active
        self._bytes_since_index = 0
        self._index_interval = config.index_interval_bytes
        self._tail = None  # (position, base offset, last offset) of the batch appended last
        self._read_end = None  # (base offset, position) of the batch a read stopped before
        index_path = segment_path(directory, base_offset, INDEX_SUFFIX) + name_suffix
        time_index_path = segment_path(directory, base_offset, TIME_INDEX_SUFFIX) + name_suffix
        self.index_missing = not os.path.exists(index_path)
        self.time_index_missing = not os.path.exists(time_index_path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._closed = False
        try:
            self.index = OffsetIndex(index_path, base_offset, config.segment_index_bytes)
            self.time_index = TimeIndex(time_index_path, base_offset, config.segment_index_bytes)
        except OSError:
            os.close(self._fd)
            raise
        # a sealed segment under its live names may be evicted (descriptor_cache.py)
        self._evictable = not name_suffix
        if self._evictable:
            CACHE.add(self)

    # -- the descriptor (closed when evicted, reopened on use) --------------------------------

    @property
    def fd(self) -> int:
        """The ``.log``'s descriptor, reopened if the descriptor cache evicted it (-1 once
        closed). Raises OSError when the reopen fails (EMFILE: the limit, named by the
        StorageError the callers wrap it in)."""
        fd = self._fd
        if fd >= 0:
            if self._evictable and not self.active:
                CACHE.touch(self)
            return fd
        if self._closed:
            return -1
        with _REOPEN:
            reopened = self._fd < 0 and not self._closed
            if reopened:
                self._fd = os.open(self.path, os.O_RDWR)
            fd = self._fd
        if reopened:  # outside the lock: adding may evict another segment, which takes it
            CACHE.add(self)
        return fd

    def evict(self) -> None:
        """Release the descriptor (closed after the cache's grace period) and the index
        mappings of a sealed segment; the next use reopens them. Only the descriptor cache
        calls this, on the thread that reads the indexes."""
        if self.active or self._closed:
            return
        with _REOPEN:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            CACHE.retire_fd(fd)
        self.index.release()
        self.time_index.release()

    @classmethod
    def create(cls, directory: str, base_offset: int, config: LogConfig, *,
               now_ms: int, name_suffix: str = "") -> LogSegment:
        """A new, empty, active segment; stale files of the same name are replaced.
        Raises StorageError (ENOSPC when the disk cannot hold ``segment.bytes``)."""
        try:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(segment_path(directory, base_offset, suffix) + name_suffix)
            segment = cls(directory, base_offset, config, now_ms=now_ms, name_suffix=name_suffix)
        except OSError as exc:
            raise StorageError.from_os_error(exc, path=directory,
                                             operation="create a segment in") from exc
        try:
            faults.point("segment.before_allocate")
            segment.index_missing = segment.time_index_missing = False
            segment.activate(fresh=True)
        except OSError as exc:
            segment.close()
            segment.remove_files()
            raise StorageError.from_os_error(exc, path=segment.path,
                                             operation="preallocate") from exc
        return segment

    # -- state ------------------------------------------------------------------------------

    @property
    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

    @property
    def index_full(self) -> bool:
        """Leave one slot in each index for the final time index entry written on seal."""
        return (self.index.entries >= self.index.max_entries - 1
                or self.time_index.entries >= self.time_index.max_entries - 1)

    def largest_timestamp_ms(self) -> int:
        """Max batch timestamp, or the file's mtime when no batch has one (Kafka's rule)."""
        if self.max_timestamp > 0:
            return self.max_timestamp
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    def activate(self, *, min_capacity: int = 0, fresh: bool = False) -> None:
        """Preallocate to ``segment.bytes`` (or more) for appends. Raises OSError (ENOSPC)."""
        if self.active:
            return
        CACHE.forget(self)  # the append path keeps its descriptor
        capacity = max(self.config.segment_bytes, self.size, min_capacity, _PAGE)
        os.posix_fallocate(self.fd, 0, capacity)
        self._capacity = capacity
        if fresh:
            self.index.load(active=True, max_relative_offset=0, max_position=0)
            self.time_index.load(active=True, max_relative_offset=0, max_position=0)
        else:
            self.index.activate()
            self.time_index.activate()
        self.active = True
        entries = self.index.entries
        last_indexed = self.index.entry_at(entries - 1)[1] if entries else 0
        self._bytes_since_index = self.size - last_indexed

    def seal(self) -> None:
        """Stop appending: trim the file to its size, record the final max timestamp, trim the
        indexes. Raises OSError; the segment stays usable for reads either way."""
        if not self.active:
            return
        self.active = False
        os.ftruncate(self.fd, self.size)
        self.seal_indexes()
        if self._evictable and not self.deleted:
            CACHE.add(self)

    def seal_indexes(self) -> None:
        """Record the segment's max timestamp as the last time index entry (a sealed segment's
        max timestamp is read from there on reopen), then trim both indexes."""
        if self.max_timestamp > 0 and self.time_index.entries < self.time_index.max_entries:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.seal()
        self.time_index.seal()

    def drop_index_pages(self) -> None:
        """Let go of the index pages that opening faulted in (recovery's scans, an attach's
        searches): they are page cache, but counted in this process's RSS, and an unclean
        restart of 5,000 partitions per worker (64 KiB indexes) kept 341 MB resident against
        90 MB before (issue 26). Appends and lookups fault back the few pages they use."""
        self.index.drop_resident()
        self.time_index.drop_resident()

    # -- appending --------------------------------------------------------------------------

    def append(self, data: memoryview, spans: list, first_offset: int, *,
               append_time_ms: int | None, leader_epoch: int | None,
               base_offsets: list[int] | None = None) -> None:
        """Write validated batches with their offsets patched. ``spans``: one ``(position in
        data, size, last_offset_delta, max_timestamp)`` per batch. ``base_offsets``: each
        batch's own base offset when they skip offsets (a follower's copy of a compacted
        leader's); otherwise they follow each other from ``first_offset``. Raises OSError; on
        error nothing is published (``size`` and ``next_offset`` are unchanged)."""
        if base_offsets is not None:
            return self._append_at(data, spans, base_offsets)
        pos, n = self.size, len(data)
        if pos + n > self._capacity:
            self._grow(pos + n)
        if n >= COPY_THRESHOLD and append_time_ms is None:
            self._pwritev(pos, _patched_iov(data, spans, first_offset, leader_epoch))
        else:  # small, or stamped (bytes inside the CRC change): patch a copy
            self._pwritev(pos, [_patched_copy(data, spans, first_offset, leader_epoch,
                                              append_time_ms)])
        offset = first_offset
        for rel, size, delta, max_ts in spans:
            offset += delta + 1
            self._track(pos + rel, offset - 1, max_ts if append_time_ms is None else append_time_ms,
                        size)
        if faults.ARMED:
            faults.point("segment.after_write")
        self.size = pos + n
        self.next_offset = offset
        if spans:
            rel, _, delta, _ = spans[-1]
            self._tail = (pos + rel, offset - 1 - delta, offset - 1)

    def _append_at(self, data: memoryview, spans: list, base_offsets: list[int]) -> None:
        """Batches whose base offsets are already right, written as they are (no patch)."""
        pos, n = self.size, len(data)
        if pos + n > self._capacity:
            self._grow(pos + n)
        self._pwritev(pos, [data])
        offset = self.next_offset
        for (rel, size, delta, max_ts), base in zip(spans, base_offsets, strict=True):
            offset = base + delta + 1
            self._track(pos + rel, offset - 1, max_ts, size)
        self.size = pos + n
        self.next_offset = offset
        if spans:
            self._tail = (pos + spans[-1][0], base_offsets[-1], offset - 1)

    def append_cleaned(self, data, batches: list) -> None:
        """The log cleaner's write: whole batches with their original offsets (``batches``:
        ``(position in data, BatchHeader)``), tracked for the indexes. Raises OSError."""
        self._append_at(memoryview(data), [(rel, h.size, h.last_offset_delta, h.max_timestamp)
                                           for rel, h in batches],
                        [h.base_offset for _, h in batches])

    def _pwritev(self, pos: int, iov: list) -> None:
        """Write ``iov`` at ``pos`` completely (IOV_MAX pieces per call; short writes resumed)."""
        if len(iov) == 1 and not faults.ARMED:  # the common small append: one plain pwrite
            done = os.pwrite(self.fd, iov[0], pos)
            if done == len(iov[0]):
                return
            iov, pos = [memoryview(iov[0])[done:]], pos + done
        if faults.armed("segment.torn_write"):  # the first batch's head and half its payload
            torn = [iov[0], iov[1][: len(iov[1]) // 2]] if len(iov) > 1 else [
                memoryview(iov[0])[: len(iov[0]) // 2]]
            os.pwritev(self.fd, torn, pos)
            faults.point("segment.torn_write")
        for i in range(0, len(iov), _IOV_MAX):
            chunk = iov[i : i + _IOV_MAX]
            total = sum(len(piece) for piece in chunk)
            done = os.pwritev(self.fd, chunk, pos)
            if done < total:  # rare (a signal, a quota): finish with plain writes
                rest = b"".join(bytes(piece) for piece in chunk)[done:]
                while rest:
                    written = os.pwrite(self.fd, rest, pos + done)
                    done, rest = done + written, rest[written:]
            pos += total

    def _grow(self, capacity: int) -> None:
        """A reopened segment may be fuller than segment.bytes allows now; make room."""
        os.posix_fallocate(self.fd, 0, capacity)
        self._capacity = capacity

    def _track(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        """Account one batch: max timestamp, and an index entry every index.interval.bytes."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self._index_interval and not self.index.is_full:
            self.index.append(last_offset, position)
            time_index = self.time_index
            if self.max_timestamp > time_index.last_timestamp and not time_index.is_full:
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def track_batch(self, position: int, header: rb.BatchHeader) -> None:
        """:meth:`_track` for a batch found on disk (recovery, index rebuild)."""
        self._track(position, header.last_offset, header.max_timestamp, header.size)

    def discard_tail(self, start: int, end: int) -> None:
        """Zero ``[start, end)`` of the active file: bytes of a failed append, or a torn tail.
        Raises OSError."""
        if self.active and end > start:
            os.pwrite(self.fd, bytes(end - start), start)

    # -- reading ----------------------------------------------------------------------------

    def tail_batch(self, offset: int) -> tuple[int, rb.BatchHeader] | None:
        """(position, header) of the batch appended last when it holds ``offset``, else None.

        Why: a follower in sync, and a consumer at the tail, fetch exactly the batch that was
        just appended, and finding it through the index (a binary search, then a scan of the
        headers from the entry, up to ``index.interval.bytes`` of small batches) was most of
        a leader's read for them. The header is read from the file and must still be the last
        batch, with the offsets remembered; anything else (a truncation, a repair) answers
        None and the caller looks it up the usual way."""
        tail = self._tail
        if tail is None or not tail[1] <= offset <= tail[2]:
            return None
        position = tail[0]
        header = self._header_at(position)
        if (header is None or header.base_offset != tail[1] or header.last_offset != tail[2]
                or position + header.size != self.size):
            return None
        return position, header

    def note_read_end(self, position: int, header: rb.BatchHeader) -> None:
        """A read stopped before the batch at ``position`` (``header``): see
        :meth:`batch_after_read`."""
        self._read_end = (header.base_offset, position)

    def batch_after_read(self, offset: int) -> tuple[int, rb.BatchHeader] | None:
        """(position, header) of the batch a read stopped before, when ``offset`` is its base
        offset, else None.

        Why: a follower catching up asks next for exactly where its last answer ended, and
        each answer's batch was found through the index (a binary search, then a scan of
        headers from the entry). Offsets grow along the file, so the batch there is the
        first whose last offset reaches ``offset``, as the index would answer. The header
        is read again and must still start there; a truncation forgets the position."""
        hint = self._read_end
        if hint is None or hint[0] != offset:
            return None
        position = hint[1]
        header = self._header_at(position)
        if header is None or header.base_offset != offset or position + header.size > self.size:
            return None
        return position, header

    def _header_at(self, position: int) -> rb.BatchHeader | None:
        data = os.pread(self.fd, rb.HEADER_BYTES, position)
        if len(data) < rb.HEADER_BYTES:
            return None
        header = rb.BatchHeader._make(rb.HEADER.unpack_from(data))
        return header if header.magic == rb.MAGIC else None

    def headers(self, start: int, end: int):
        """Yield ``(position, BatchHeader)`` for the batches in ``[start, end)``, reading only
        headers (see :func:`read_headers`). Raises CorruptRecordError when a header is
        implausible (never serve garbage)."""
        return read_headers(self.fd, self.path, start, end)

    def read_bytes(self, position: int, length: int) -> bytes:
        """Copy bytes out of the file (recovery, timestamp refinement, tests; not Fetch)."""
        return os.pread(self.fd, length, position)

    def flush(self) -> None:
        """fdatasync the ``.log``. Raises OSError."""
        os.fdatasync(self.fd)

    # -- files ------------------------------------------------------------------------------

    def truncate_file(self, size: int) -> None:
        """Cut the file at ``size``: ftruncate, and re-preallocate when active so the rest is
        zeros (an old batch left there could otherwise come back after a crash)."""
        self.size = size
        self._tail = None
        self._read_end = None
        os.ftruncate(self.fd, size)
        if self.active:
            os.posix_fallocate(self.fd, 0, self._capacity)

    def rename_for_deletion(self) -> None:
        """Rename the files to ``*.deleted``; the open fd stays valid for readers."""
        self._pin()
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.directory, self.base_offset, suffix)
            if os.path.exists(path):
                os.rename(path, path + DELETED_SUFFIX)
        self.deleted = True

    def replaced(self) -> None:
        """A cleaned segment now has this one's names (cleaning_swap.py): this one's files are
        reachable only through its open descriptors, and :meth:`remove_files` leaves the
        names alone."""
        self._pin()
        self.deleted = True
        self._owns_files = False

    def _pin(self) -> None:
        """Its names are about to change: open it if evicted, and never evict it again."""
        self._evictable = False
        CACHE.forget(self)
        _ = self.fd

    def remove_files(self) -> None:
        """Unlink the files: the ``*.deleted`` names once renamed (a live segment with the same
        base offset may exist by then), else the live names. Call after :meth:`close`."""
        if not self._owns_files:
            return
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.directory, self.base_offset, suffix) + self.name_suffix
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + DELETED_SUFFIX if self.deleted else path)

    def sync_all(self) -> None:
        """fdatasync the ``.log`` and both indexes (clean shutdown). Raises OSError."""
        os.fdatasync(self.fd)
        self.index.sync()
        self.time_index.sync()

    def close(self) -> None:
        """Release the index maps and the fd. Trims an active file first."""
        if self.active and not self.deleted:
            with contextlib.suppress(OSError):  # keep closing; recovery trims the file
                self.seal()
        self.active = False
        CACHE.forget(self)
        self.index.close()
        self.time_index.close()
        with _REOPEN:
            self._closed = True
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __repr__(self) -> str:
        state = "active" if self.active else "sealed"
        return (f"<LogSegment {self.path} {state} offsets [{self.base_offset}, "
                f"{self.next_offset}) {self.size} bytes>")


def read_headers(fd: int, path: str, start: int, end: int, *, zeros_end: bool = False):
    """Yield ``(position, BatchHeader)`` for the batches in ``[start, end)`` of the file open as
    ``fd``, reading only headers (``os.pread`` in 8 KiB chunks, so one call covers the few
    batches between two index entries). ``zeros_end``: an all-zero header is the end of data
    (a reader of files it does not own may meet the zeros of a file not yet trimmed). Raises
    CorruptRecordError when a header is implausible (never serve garbage)."""
    buf, base = b"", start
    pos = start
    while pos < end:
        off = pos - base
        if off < 0 or off + rb.HEADER_BYTES > len(buf):
            buf, base, off = os.pread(fd, max(_READ_CHUNK, rb.HEADER_BYTES), pos), pos, 0
        if off + rb.HEADER_BYTES > len(buf):
            raise CorruptRecordError(f"short batch header at byte {pos}", path=path,
                                     position=pos)
        header = rb.BatchHeader._make(rb.HEADER.unpack_from(buf, off))
        if header.magic != rb.MAGIC or header.batch_length < rb.MIN_BATCH_LENGTH or (
            pos + header.size > end
        ):
            if zeros_end and buf[off : off + rb.HEADER_BYTES] == _ZERO_HEADER:
                return
            raise CorruptRecordError(
                f"implausible batch header at byte {pos}: magic {header.magic}, "
                f"batch_length {header.batch_length}, segment end {end}",
                path=path, position=pos,
            )
        yield pos, header
        pos += header.size


def _patch(buf, pos: int, offset: int, leader_epoch: int | None) -> None:
    """Set a batch's base offset (and leader epoch) in ``buf``; both lie outside the CRC."""
    rb.set_base_offset(buf, pos, offset)
    if leader_epoch is not None:
        rb.set_leader_epoch(buf, pos, leader_epoch)


def _patched_iov(data: memoryview, spans: list, offset: int, leader_epoch) -> list:
    """For ``pwritev``: per batch a patched copy of its first 16 bytes, then a view of the rest."""
    iov = []
    for rel, size, delta, _ in spans:
        head = bytearray(data[rel : rel + _HEAD])
        _patch(head, 0, offset, leader_epoch)
        iov.append(head)
        iov.append(data[rel + _HEAD : rel + size])
        offset += delta + 1
    return iov


def _patched_copy(data, spans, offset: int, leader_epoch, append_time_ms) -> bytearray:
    """One copy of the append, patched, and stamped with LogAppendTime when given (CRC
    recomputed once per batch)."""
    buf = bytearray(data)
    for rel, size, delta, _ in spans:
        _patch(buf, rel, offset, leader_epoch)
        if append_time_ms is not None:
            rb.stamp_log_append_time(buf, rel, size, append_time_ms)
        offset += delta + 1
    return buf
