"""The sparse offset index and time index of one segment: fixed-size entries in an mmap'd file.

On-disk formats (Kafka's; big-endian; offsets relative to the segment's base offset)::

    .index      8-byte entries   int32 relative offset  the LAST offset of an indexed batch
                                 int32 position         byte position of that batch in the .log
    .timeindex  12-byte entries  int64 timestamp        the segment's max timestamp so far
                                 int32 relative offset  the last offset of the batch that first
                                                        reached that timestamp

Invariants: entries strictly increase (offsets and positions; timestamps); an index can always
be rebuilt from its ``.log``, so damage is repaired, never fatal. The file of an *active* index
is preallocated to ``segment.index.bytes`` with ``posix_fallocate`` (so a write through the map
can never hit a hole on a full disk: that would be SIGBUS, not ENOSPC) and the unused tail is
zeros; a *sealed* index is trimmed to its entries, as Kafka trims on roll.

Descriptors: none held. The file is opened for the moment it is mapped, resized or synced
(``_opened``) and the mapping outlives the descriptor (``fdless_map.py``); ``sync`` opens the
file only when something was written since the last sync, so a sealed index whose file the
cleaner renamed afterwards is never reopened by its old name.

Concurrency: only the log's writer thread calls mutating methods; lookups run on the same
thread. Nothing here is thread-safe.

What can fail: ``OSError`` from open/fallocate/mmap (the segment wraps it in StorageError);
:class:`IndexFullError` from ``append`` when the caller forgot to roll (a bug).
"""

from __future__ import annotations

import contextlib
import os
import struct

from .fdless_map import FdlessMap


def _map(fd: int, length: int, *, writable: bool) -> FdlessMap:
    """Map an index with MADV_RANDOM: lookups are binary searches, and without it the first
    write fault of a fresh file fills a whole large folio (measured: ~3 ms for a 10 MiB index on
    ext4, kernel 6.18) where one 4 KiB page is needed. The map holds no descriptor
    (fdless_map.py): an index costs a descriptor only while it is being mapped or synced."""
    return FdlessMap(fd, length, writable=writable)


class IndexFullError(Exception):
    """An append to an index that has no room left; the log rolls before this can happen."""


class _MappedIndex:
    ENTRY: struct.Struct
    KEY = 0  # field searched by lookup()

    def __init__(self, path: str, base_offset: int, max_index_bytes: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_index_bytes // self.ENTRY.size
        self.entries = 0
        self.damaged = False  # entries were dropped when the file was loaded
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))  # exists from now on
        self._mapping: FdlessMap | None = None
        self._map: memoryview | None = None
        self.writable = False
        self._dirty = False  # written since the last sync (sync opens the file only then)

    @contextlib.contextmanager
    def _opened(self):
        """The index file, open for one operation (never created here)."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            yield fd
        finally:
            os.close(fd)

    def _set_map(self, fd: int, length: int, *, writable: bool) -> None:
        self._mapping = _map(fd, length, writable=writable)
        self._map = self._mapping.view
        self._released = False

    _released = False  # a sealed index whose mapping the descriptor cache took back

    def release(self) -> None:
        """Unmap a sealed index (descriptor_cache.py); the next read maps it again."""
        if not self.writable and self._mapping is not None:
            self._unmap()
            self._released = True

    def _view(self) -> memoryview | None:
        if self._released:
            self._released = False
            if self.entries:
                with self._opened() as fd:
                    self._set_map(fd, self.entries * self.ENTRY.size, writable=False)
        return self._map

    # -- opening -----------------------------------------------------------------------------

    def load(self, *, active: bool, max_relative_offset: int, max_position: int,
             trusted: bool = False) -> int:
        """Map the file and count the valid entries; return how many entries the file declared.

        ``active``: the file may be preallocated (entries end at the first all-zero entry).
        Entries beyond the first one that breaks monotonicity or bounds are dropped and
        ``damaged`` is set; the caller re-adds entries from the log. ``trusted`` (attach after
        a worker restart): monotonicity is assumed, not checked entry by entry; the entries
        within the bounds are found by binary search, those beyond are dropped without setting
        ``damaged`` (they belong to a tail the caller validates).
        """
        with self._opened() as fd:
            size = os.fstat(fd).st_size
            if active:
                self._activate(fd, size)
                declared = self._first_zero_entry(min(size // self.ENTRY.size, self.max_entries))
            else:
                declared = size // self.ENTRY.size
                self.damaged = size % self.ENTRY.size != 0
                if declared:
                    self._set_map(fd, declared * self.ENTRY.size, writable=False)
        if trusted:
            valid = self._bounded_prefix(declared, max_relative_offset, max_position)
        else:
            valid = self._valid_prefix(declared, max_relative_offset, max_position)
            self.damaged = self.damaged or valid < declared
        self.entries = valid
        if valid < declared and self.writable:
            self._zero(valid, declared)
        return declared

    def _activate(self, fd: int, size: int) -> None:
        capacity = self.max_entries * self.ENTRY.size
        if size < capacity:
            os.posix_fallocate(fd, 0, capacity)
            self._dirty = True
        elif size > capacity:  # segment.index.bytes shrank since: drop what no longer fits
            os.ftruncate(fd, capacity)
            self._dirty = True
        if capacity:
            self._set_map(fd, capacity, writable=True)
        self.writable = True

    def _first_zero_entry(self, limit: int) -> int:
        """Binary search for the end of the written prefix of a preallocated file."""
        zero = bytes(self.ENTRY.size)
        size = self.ENTRY.size
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi) // 2
            if self._map[mid * size : (mid + 1) * size] == zero:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _valid_prefix(self, count: int, max_relative_offset: int, max_position: int) -> int:
        if not count:
            return 0
        data = self._map[: count * self.ENTRY.size]
        good = 0
        previous = None
        for entry in self.ENTRY.iter_unpack(data):
            if not self._entry_ok(entry, previous, max_relative_offset, max_position):
                break
            previous = entry
            good += 1
        return good

    def _bounded_prefix(self, count: int, max_relative_offset: int, max_position: int) -> int:
        """How many leading entries lie within the bounds, by binary search (entries are
        monotonic, so those within the bounds are a prefix)."""
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            if self._within(self.entry(mid), max_relative_offset, max_position):
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- reading -----------------------------------------------------------------------------

    def entry(self, n: int) -> tuple:
        return self.ENTRY.unpack_from(self._view(), n * self.ENTRY.size)

    def _search(self, target: int, field: int) -> int:
        """Index of the largest entry whose ``field`` is <= target, or -1."""
        unpack, m, size = self.ENTRY.unpack_from, self._view(), self.ENTRY.size
        lo, hi = 0, self.entries - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if unpack(m, mid * size)[field] <= target:
                lo = mid + 1
            else:
                hi = mid - 1
        return hi

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    # -- writing -----------------------------------------------------------------------------

    def _append(self, *fields: int) -> None:
        if self.entries >= self.max_entries:
            raise IndexFullError(f"{self.path} is full ({self.max_entries} entries)")
        self.ENTRY.pack_into(self._map, self.entries * self.ENTRY.size, *fields)
        self.entries += 1
        self._dirty = True

    def _truncate_entries(self, keep: int) -> None:
        if keep < self.entries:
            self._zero(keep, self.entries)
            self.entries = keep

    def reset(self) -> None:
        """Drop every entry (the caller rebuilds from the log). A damaged file is zeroed whole,
        so no garbage survives past the rebuilt entries."""
        if self.damaged and self._view() is not None:
            self._map[:] = bytes(len(self._map))
            self.entries = 0
        self._truncate_entries(0)
        self.damaged = False

    def sync(self) -> None:
        """fdatasync the file (the mapped writes and its size) if anything changed since the
        last sync."""
        if self._dirty:
            with self._opened() as fd:
                os.fdatasync(fd)
            self._dirty = False

    def _zero(self, start: int, end: int) -> None:
        size = self.ENTRY.size
        self._view()[start * size : end * size] = bytes((end - start) * size)
        self._dirty = True

    def activate(self) -> None:
        """Make a sealed index writable again (segment reopened for appends)."""
        if not self.writable:
            self._unmap()
            self._released = False
            with self._opened() as fd:
                self._activate(fd, os.fstat(fd).st_size)

    def seal(self) -> None:
        """Trim the file to its entries and map it read-only (Kafka's trimToValidSize)."""
        if self.writable:
            self._unmap()
            with self._opened() as fd:
                os.ftruncate(fd, self.size_bytes)
                self._dirty = True
                self.writable = False
                if self.entries:
                    self._set_map(fd, self.size_bytes, writable=False)

    def drop_resident(self) -> None:
        """Let go of the mapping's resident pages (after recovery read them: fdless_map.py)."""
        if self._mapping is not None:
            self._mapping.drop_resident()

    def _unmap(self) -> None:
        if self._mapping is not None:
            self._map = None
            self._mapping.close()
            self._mapping = None

    def close(self) -> None:
        self._unmap()
        self._released = False


class OffsetIndex(_MappedIndex):
    """Maps the last offset of every batch that starts ``index.interval.bytes`` after the
    previous entry to its byte position."""

    ENTRY = struct.Struct(">ii")  # relative offset, position

    def _entry_ok(self, entry, previous, max_relative_offset, max_position) -> bool:
        relative, position = entry
        if not (0 <= relative <= max_relative_offset and 0 < position < max_position):
            return False
        return previous is None or (relative > previous[0] and position > previous[1])

    @staticmethod
    def _within(entry, max_relative_offset: int, max_position: int) -> bool:
        return 0 <= entry[0] <= max_relative_offset and 0 < entry[1] < max_position

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target; else (base, 0)."""
        n = self._search(target_offset - self.base_offset, 0)
        if n < 0:
            return self.base_offset, 0
        relative, position = self.entry(n)
        return self.base_offset + relative, position

    def lookup_position(self, limit_position: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with position <= limit; else (base, 0)."""
        n = self._search(limit_position, 1)
        if n < 0:
            return self.base_offset, 0
        relative, position = self.entry(n)
        return self.base_offset + relative, position

    def entry_at(self, n: int) -> tuple[int, int]:
        relative, position = self.entry(n)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        self._truncate_entries(self._search(offset - 1 - self.base_offset, 0) + 1)


class TimeIndex(_MappedIndex):
    """Maps the segment's growing max timestamp to the offset where it was first reached."""

    ENTRY = struct.Struct(">qi")  # timestamp, relative offset

    def _entry_ok(self, entry, previous, max_relative_offset, max_position) -> bool:
        timestamp, relative = entry
        if not 0 <= relative <= max_relative_offset or (timestamp == 0 and relative == 0):
            return False
        return previous is None or (timestamp > previous[0] and relative >= previous[1])

    @staticmethod
    def _within(entry, max_relative_offset: int, max_position: int) -> bool:
        return entry[0] > 0 and 0 <= entry[1] <= max_relative_offset

    @property
    def last_timestamp(self) -> int:
        """Timestamp of the last entry, or -1 (kept in memory: the append path asks often)."""
        if self._last_timestamp_for != self.entries:
            last = self.last_entry()
            self._last_timestamp = -1 if last is None else last[0]
            self._last_timestamp_for = self.entries
        return self._last_timestamp

    _last_timestamp = -1
    _last_timestamp_for = -1

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry, or None."""
        if not self.entries:
            return None
        timestamp, relative = self.entry(self.entries - 1)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append unless ``timestamp`` does not exceed the last entry's (entries only grow).

        Timestamps <= 0 are never indexed: -1 means "no timestamp", and an all-zero entry marks
        the end of a preallocated file."""
        if timestamp > self.last_timestamp and timestamp > 0:
            self._append(timestamp, offset - self.base_offset)
            self._last_timestamp, self._last_timestamp_for = timestamp, self.entries

    def lookup(self, target_ms: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target; else (-1, base)."""
        n = self._search(target_ms, 0)
        if n < 0:
            return -1, self.base_offset
        timestamp, relative = self.entry(n)
        return timestamp, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset`` (offsets never decrease: binary search)."""
        self._truncate_entries(self._search(offset - 1 - self.base_offset, 1) + 1)
