"""A per-process bound on the descriptors and index mappings of sealed segments (issue 26).

Why: each sealed segment held its ``.log`` descriptor and two index mappings for the life of
the log, so descriptors and mappings grew with the data on disk, idle partitions included.
Here the sealed segments of every log in the process form one least-recently-used list; past
``limit`` the oldest is *evicted*: its index mappings are released and its descriptor closed,
and the next use reopens both (``LogSegment.fd``, ``_MappedIndex._view``). Active segments
(one per partition, the append path) are never evicted: the bound is ``partitions + limit``.

A descriptor is not closed at eviction but after ``grace_s`` (``file.delete.delay.ms``, the
delay after which retention closes deleted segments): a ``ReadSlice`` already handed to
``sendfile`` and a group commit's ``fdatasync`` keep a valid descriptor, by the rule the log
already follows for deleted segments. Segments whose names may change under them (the log
cleaner's output before and after its swap, segments renamed ``.deleted``) are not listed.

Threads: the worker's event loop opens, touches and evicts; the group commit thread may
reopen through ``LogSegment.fd``. One lock serialises the list and the pending closes.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict, deque

DEFAULT_LIMIT = 1 << 30  # until a worker sets it: no eviction (unit tests, tools)
DEFAULT_GRACE_S = 60.0


class DescriptorCache:
    def __init__(self, limit: int = DEFAULT_LIMIT, grace_s: float = DEFAULT_GRACE_S):
        self.limit = limit
        self.grace_s = grace_s
        self.evictions = 0
        self._lru: OrderedDict[int, object] = OrderedDict()  # id(segment) -> segment
        self._closing: deque[tuple[float, int]] = deque()  # (close at monotonic s, fd)
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread that evicts (index maps are its alone)

    def configure(self, limit: int, grace_s: float) -> None:
        """Set the bound; the calling thread (the worker's event loop) becomes the only one
        that evicts: evicting releases index mappings, which only that thread reads."""
        with self._lock:
            self.limit, self.grace_s = max(limit, 1), max(grace_s, 0.0)
            self._owner = threading.get_ident()
        self._evict_over()

    def __len__(self) -> int:
        return len(self._lru)

    def pending_closes(self) -> int:
        return len(self._closing)

    def add(self, segment) -> None:
        """A sealed segment with its descriptor open: listed as the most recently used."""
        with self._lock:
            self._lru[id(segment)] = segment
        self._evict_over()

    def touch(self, segment) -> None:
        with contextlib.suppress(KeyError):
            self._lru.move_to_end(id(segment))

    def forget(self, segment) -> None:
        """Unlist (activated, renamed, closed); an evicted segment is not reopened here."""
        with self._lock:
            self._lru.pop(id(segment), None)

    def retire_fd(self, fd: int) -> None:
        """Close ``fd`` after the grace period (see the module docstring)."""
        with self._lock:
            self._closing.append((time.monotonic() + self.grace_s, fd))
        self.close_due()

    def close_due(self, *, everything: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            while self._closing and (everything or self._closing[0][0] <= now):
                _, fd = self._closing.popleft()
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _evict_over(self) -> None:
        if self._owner is not None and threading.get_ident() != self._owner:
            return  # another thread reopened a segment: the owner evicts on its next add
        while len(self._lru) > self.limit:
            with self._lock:
                if len(self._lru) <= self.limit:
                    return
                _, segment = self._lru.popitem(last=False)
            segment.evict()
            self.evictions += 1
        self.close_due()


CACHE = DescriptorCache()
