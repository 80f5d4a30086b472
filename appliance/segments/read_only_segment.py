"""Read-only views of a segment for a process that does not own the log (non_owner_reader.py).

A :class:`ReadOnlySegment` looks to :mod:`lookup` like a
:class:`~appliance.segments.segment.LogSegment` (``index``, ``time_index``, ``headers``,
``tail_batch``, ``size``, ``read_bytes``), so a reader runs the owner's own lookups and gets
the owner's answers.
It holds ``O_RDONLY`` descriptors and never writes. Its ``size`` is set by the reader before each
use: the published ``active_bytes`` for the active segment, the file's size for a sealed one.

**Indexes are read with pread, not mmap.** The owner shrinks index files under a reader's feet:
sealing trims a preallocated index to its entries, and a rebuild or a truncation re-trims a
sealed one. A page of a read-only map beyond the new end of file is SIGBUS on access, which
would kill the reading worker; a ``pread`` there just comes back short. A lookup is a binary
search of 8- or 12-byte preads that ends with one pread of the last 4 KiB window (about 10
calls for a 1 GiB segment), so no index is copied into memory.

What the reader cannot trust is filtered out, entry by entry, as the search meets it: all-zero
entries (the preallocated tail of an active index), entries beyond the published bytes or
offsets (an append in flight), entries beyond the end of the file. What remains is assumed
monotonic; an entry that does not point at the batch it names still raises
``lookup.IndexMismatchError`` (the owner may be rewriting that index), and the reader then
looks up without the index (:data:`NO_INDEX`).

Concurrency: one thread per object, like the owner's segments. What can fail: OSError.
"""

from __future__ import annotations

import os
import struct

from .layout import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from .segment import read_headers

_WINDOW_BYTES = 4096  # the binary search finishes inside one pread of this many bytes
_UNBOUNDED = 2**63 - 1


class PreadIndex:
    """Binary search over an index file with ``os.pread``. Opened lazily; a missing file
    behaves as an empty index."""

    ENTRY: struct.Struct
    KEY = 0

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.max_relative_offset = _UNBOUNDED  # entries naming later offsets are ignored
        self.max_position = _UNBOUNDED  # offset index: entries at or past this are ignored
        self._fd = -1

    def _usable(self, entry: tuple) -> bool:
        raise NotImplementedError

    def _largest_at_most(self, target: int, field: int) -> tuple | None:
        """The last usable entry whose ``field`` is <= ``target``, or None."""
        fd = self._open()
        if fd < 0:
            return None
        size = self.ENTRY.size
        lo, hi = 0, os.fstat(fd).st_size // size  # entries < lo qualify, entries >= hi do not
        window = _WINDOW_BYTES // size
        while hi - lo > window:
            mid = (lo + hi) // 2
            data = os.pread(fd, size, mid * size)
            if len(data) == size and self._qualifies(self.ENTRY.unpack(data), target, field):
                lo = mid + 1
            else:
                hi = mid
        data = os.pread(fd, (hi - lo) * size, lo * size) if hi > lo else b""
        found, n = None, len(data) // size
        a, b = 0, n
        while a < b:
            mid = (a + b) // 2
            if self._qualifies(self.ENTRY.unpack_from(data, mid * size), target, field):
                a = mid + 1
            else:
                b = mid
        if a:
            found = self.ENTRY.unpack_from(data, (a - 1) * size)
        elif lo:  # the entry just below the window (the owner may have trimmed it meanwhile)
            data = os.pread(fd, size, (lo - 1) * size)
            found = self.ENTRY.unpack(data) if len(data) == size else None
        return found

    def _qualifies(self, entry: tuple, target: int, field: int) -> bool:
        return self._usable(entry) and entry[field] <= target

    def last_entry_raw(self) -> tuple | None:
        """The last usable entry (the largest within the bounds), or None."""
        return self._largest_at_most(_UNBOUNDED, self.KEY)

    def _open(self) -> int:
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return -1
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class PreadOffsetIndex(PreadIndex):
    """The ``.index`` (relative offset, position), with OffsetIndex's lookups."""

    ENTRY = struct.Struct(">ii")

    def _usable(self, entry: tuple) -> bool:
        relative, position = entry
        return 0 <= relative <= self.max_relative_offset and 0 < position < self.max_position

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target; else (base, 0)."""
        found = self._largest_at_most(target_offset - self.base_offset, 0)
        return (self.base_offset, 0) if found is None else (self.base_offset + found[0], found[1])

    def lookup_position(self, limit_position: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with position <= limit; else (base, 0)."""
        found = self._largest_at_most(limit_position, 1)
        return (self.base_offset, 0) if found is None else (self.base_offset + found[0], found[1])


class PreadTimeIndex(PreadIndex):
    """The ``.timeindex`` (timestamp, relative offset), with TimeIndex's lookup."""

    ENTRY = struct.Struct(">qi")

    def _usable(self, entry: tuple) -> bool:
        timestamp, relative = entry
        return timestamp > 0 and 0 <= relative <= self.max_relative_offset

    def lookup(self, target_ms: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target; else (-1, base)."""
        found = self._largest_at_most(target_ms, 0)
        return (-1, self.base_offset) if found is None else (found[0], self.base_offset + found[1])

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last usable entry, or None."""
        found = self.last_entry_raw()
        return None if found is None else (found[0], self.base_offset + found[1])


class _NoIndex:
    """Stands in for an offset index that failed its check: every lookup starts at byte 0."""

    path = "(no index)"

    def __init__(self, base_offset: int):
        self.base_offset = base_offset

    def lookup(self, target_offset: int) -> tuple[int, int]:
        return self.base_offset, 0

    def lookup_position(self, limit_position: int) -> tuple[int, int]:
        return self.base_offset, 0


class ReadOnlySegment:
    """One segment of a log another process owns. ``fd`` is O_RDONLY and stays open until
    :meth:`close`, even after the owner renames or removes the files (the inode lives on).
    Raises FileNotFoundError from the constructor when the ``.log`` is gone."""

    def __init__(self, directory: str, base_offset: int):
        self.base_offset = base_offset
        self.path = segment_path(directory, base_offset, LOG_SUFFIX)
        self.fd = os.open(self.path, os.O_RDONLY)
        stat = os.fstat(self.fd)
        self.inode = (stat.st_dev, stat.st_ino)
        self.checked_at = 0.0  # when the reader last checked the name still holds this file
        self.file_size = stat.st_size  # sealed segments: the size; refreshed by the reader
        self.size = 0  # the bound every scan respects; set before each use
        self.end_offset = base_offset  # the offset after the last batch readable; ditto
        self.active = False  # the published active segment (bounded by active_bytes)
        self.index = PreadOffsetIndex(segment_path(directory, base_offset, INDEX_SUFFIX),
                                      base_offset)
        self.time_index = PreadTimeIndex(
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX), base_offset)
        self.sealed_max_timestamp: int | None = None  # cached: a sealed time index is final

    def bound(self, size: int, end_offset: int | None) -> None:
        """Limit every scan and index entry to ``size`` bytes and offsets below
        ``end_offset`` (None: unbounded, a sealed segment)."""
        self.size = size
        self.index.max_position = size
        relative = _UNBOUNDED if end_offset is None else end_offset - 1 - self.base_offset
        self.index.max_relative_offset = self.time_index.max_relative_offset = relative

    def headers(self, start: int, end: int):
        """Batch headers in ``[start, end)``; an all-zero header ends the data (a sealed file
        the owner could not trim). Raises CorruptRecordError."""
        return read_headers(self.fd, self.path, start, end, zeros_end=True)

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def tail_batch(self, offset: int) -> None:
        """Never known here: the owner appends, in another process (its hints stand in)."""
        return None

    def batch_after_read(self, offset: int) -> None:
        """Not kept here: the owner's hints stand in (non_owner_reader.py)."""
        return None

    def note_read_end(self, position: int, header) -> None:
        pass

    def without_index(self) -> ReadOnlySegment:
        """This segment with lookups that ignore the index (after an IndexMismatchError)."""
        clone = object.__new__(ReadOnlySegment)
        clone.__dict__.update(self.__dict__)
        clone.index = _NoIndex(self.base_offset)
        return clone

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"<ReadOnlySegment {self.path} bound at {self.size} bytes>"
