"""Size-prefixed framing for a reader that receives straight into our memory (``recv_into``,
asyncio's ``BufferedProtocol``): the broker's side of a connection.

:class:`~klog.protocol.frames.FrameBuffer` takes ``bytes`` the caller has already received;
a 1 MB produce request then costs the kernel's copy into those ``bytes``, the assembling of
the pieces in a ``bytearray`` (with its reallocations) and a copy of the frame out of it:
three copies of every record before the log's own. Here the caller asks :meth:`get_buffer`
where the next bytes go and says how many came with :meth:`buffer_updated`; the kernel's copy
is then the only one:

- Small frames land in an *arena*, a ``bytearray`` filled front to back and never rewritten
  (a connection's first is 4 KiB, each next one twice as large up to 256 KiB: thousands of
  idle connections hold little):
  a frame is a memoryview of it, valid for as long as its request lives (a produce that waits
  for its transaction's verification, or for its replicas, still reads its records). When the
  arena's room runs low a new one is started, the unfinished frame's head copied over; an old
  arena is freed when its last frame is. An arena whose every frame is handed out and let go
  (no view of it left, as the pool tells) is filled again from its front instead: a busy
  connection's next 256 KiB arena cost its zeroing and page faults every megabyte or so.
- A frame too large for the arena's room (a producer's batch) gets a buffer of its own,
  which the kernel fills with nothing but that frame. Those buffers come from a
  :class:`BufferPool` and go back to it once no frame refers to them: a fresh megabyte
  costs its page faults and zeroing every time, a seventh of a worker's produce CPU.

The size prefix is checked as soon as its 4 bytes are here, as in ``FrameBuffer``: a hostile
size raises :class:`FramingError` before any memory is reserved for it; and a frame's
memory is reserved in step with the bytes that have come, so a size prefix followed by
silence reserves little.
"""

from __future__ import annotations

import sys
import threading

from klog.protocol.exceptions import FramingError
from klog.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from klog.protocol.primitives import INT32

ARENA_BYTES = 256 * 1024  # asyncio's own read size: the largest arena
FIRST_ARENA_BYTES = 4096  # a connection's first; each next one twice the last, to the largest
OWN_BUFFER_BYTES = 64 * 1024  # a frame from this size on that does not fit gets its own buffer
RESERVE_PER_BYTE_HERE = 8  # ... once an eighth of it is here (a 1 MB batch: one 256 KiB read)


POOLED_MAX_BYTES = 8 << 20  # larger frames get a buffer of their own, freed with them
POOL_MAX_BYTES = 32 << 20  # what one process keeps for reuse


def _min_room(arena_bytes: int) -> int:
    """Below this much room, the next read goes to a new arena (a sixteenth of it)."""
    return max(arena_bytes // 16, 256)


class BufferPool:
    """Large receive buffers, reused once nothing refers to them any more.

    A buffer is free when the pool's own references are the only ones left: every frame
    handed out is a memoryview of it, and a memoryview keeps its buffer referenced until it
    (and every slice of it) is gone, so ``sys.getrefcount`` says exactly when no request
    still reads it. Sizes are powers of two, so batches of nearly the same size share."""

    def __init__(self, max_bytes: int = POOL_MAX_BYTES,
                 max_buffer_bytes: int = POOLED_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.max_buffer_bytes = max_buffer_bytes
        self._buffers: list[bytearray] = []
        self._bytes = 0
        self._lock = threading.Lock()  # one worker's loop, but tests share it across threads

    def take(self, size: int) -> memoryview:
        """A writable view of exactly ``size`` bytes nobody else is using (old contents)."""
        if size > self.max_buffer_bytes:
            return memoryview(bytearray(size))
        with self._lock:
            for buffer in self._buffers:
                # references: the list's, the loop's, getrefcount's argument
                if len(buffer) >= size and sys.getrefcount(buffer) == 3:
                    return memoryview(buffer)[:size]
            buffer = bytearray(max(1 << (size - 1).bit_length(), OWN_BUFFER_BYTES))
            if self._bytes + len(buffer) <= self.max_bytes:
                self._buffers.append(buffer)
                self._bytes += len(buffer)
            return memoryview(buffer)[:size]


SHARED_POOL = BufferPool()


class ArenaFrameBuffer:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 arena_bytes: int = ARENA_BYTES, pool: BufferPool = SHARED_POOL) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._pool = pool
        self._arena_bytes = arena_bytes
        self._next_arena_bytes = min(FIRST_ARENA_BYTES, arena_bytes)
        self._arena = bytearray(0)
        self._start = 0  # the arena's first byte not yet handed out
        self._end = 0  # the arena's first byte not yet received
        self._own: memoryview | None = None  # a large frame's own buffer while it fills
        self._own_filled = 0
        self._done: memoryview | None = None  # a large frame received, not yet handed out

    @property
    def buffered_bytes(self) -> int:
        pending = self._end - self._start
        if self._own is not None:
            pending += 4 + self._own_filled
        if self._done is not None:
            pending += 4 + len(self._done)
        return pending

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty; write at most its length)."""
        if self._own is not None:
            return self._own[self._own_filled:]
        if len(self._arena) - self._end < _min_room(len(self._arena)):
            self._make_room()
            if self._own is not None:
                return self._own[self._own_filled:]
        return memoryview(self._arena)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the last :meth:`get_buffer`."""
        if self._own is not None:
            self._own_filled += nbytes
            if self._own_filled == len(self._own):  # later bytes go to the arena
                self._done, self._own = self._own, None
        else:
            self._end += nbytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """For a caller holding bytes already (tests, a TLS layer that hands out bytes)."""
        view = memoryview(data)
        while view:
            into = self.get_buffer()
            n = min(len(into), len(view))
            into[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    def next_frame(self) -> memoryview | None:
        """The next whole frame's content (without the size prefix), or None if incomplete.
        The view stays valid and unchanged for as long as the caller keeps it."""
        if self._done is not None:
            done, self._done = self._done, None
            return done
        if self._own is not None:
            return None
        arena, start = self._arena, self._start
        if self._end - start < 4:
            return None
        size = INT32.unpack_from(arena, start)[0]
        if not 0 <= size <= self.max_frame_bytes:
            raise FramingError(f"frame size {size} outside [0, {self.max_frame_bytes}]")
        end = start + 4 + size
        if end <= self._end:
            self._start = end
            return memoryview(arena)[start + 4:end]
        if end > len(arena) and self._may_own(size):  # it cannot finish here
            self._start_own(size)
        return None

    def _may_own(self, size: int) -> bool:
        """Whether the unfinished frame at the arena's start, of ``size`` bytes, may have its
        own buffer now: it is large, and enough of it is here that reserving all of it
        cannot be a peer's cheap trick (a size prefix alone, then silence, on many
        connections, would otherwise reserve ``max_frame_bytes`` on each)."""
        return size >= OWN_BUFFER_BYTES and size <= RESERVE_PER_BYTE_HERE * (
            self._end - self._start)

    def _start_own(self, size: int) -> None:
        """Move the unfinished frame at the arena's start to a buffer of its own."""
        self._own = own = self._pool.take(size)
        head = self._end - self._start - 4
        own[:head] = memoryview(self._arena)[self._start + 4:self._end]
        self._own_filled = head
        self._start = self._end

    def _make_room(self) -> None:
        """Before a read into an arena with little room: a large unfinished frame first in
        line moves to its own buffer; otherwise what is pending moves to a new arena with
        room to finish, or to grow to twice what is here (memory reserved for a frame grows
        with the bytes received, never ahead of them)."""
        pending = self._end - self._start
        wanted = 2 * pending  # growth in step with what has arrived, never ahead of it
        if pending >= 4:
            size = INT32.unpack_from(self._arena, self._start)[0]
            if 0 <= size <= self.max_frame_bytes and 4 + size > pending:  # unfinished
                if self._may_own(size):
                    self._start_own(size)
                    return
                wanted = min(wanted, 4 + size)
        if not pending and len(self._arena) >= self._next_arena_bytes and \
                sys.getrefcount(self._arena) == 2:  # ours and the argument's: no frame left
            self._start = self._end = 0  # the arena is all handed out and all let go: again
            return
        size = self._next_arena_bytes
        self._next_arena_bytes = min(2 * size, self._arena_bytes)
        self._new_arena(max(size, wanted + _min_room(wanted)))

    def _new_arena(self, size: int) -> None:
        """Start a new arena with what is pending at its front."""
        pending = self._end - self._start
        arena = bytearray(size)
        if pending:
            arena[:pending] = memoryview(self._arena)[self._start:self._end]
        self._arena, self._start, self._end = arena, 0, pending
