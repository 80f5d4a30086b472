"""The seqlock protocol that every shared entry of the region follows, and its fault points.

An entry is a u64 sequence number followed by its body. Its single writer makes the sequence
odd, writes the body, and makes it even again (the next even number). A reader copies the body
between two reads of the sequence and keeps the copy only if both reads saw the same even
number; otherwise it tries again. Readers never write, so any number of processes read while
one writes, and nobody ever waits on a lock that a dead process could hold (posix_ipc
semaphores are never released by a killed holder: libs.md; we use none).

A writer killed between its two bumps leaves the sequence odd for good. Readers then give up
after ``timeout_s`` (default 0.25 s, far above any live writer's critical section, even one
preempted for a scheduler slice) with :class:`TornEntryError`, and remember that odd value, so
the next read of the same stuck entry fails at once instead of waiting again. The entry's
owner, restarted, rewrites it with :func:`begin_repair` (which accepts an odd sequence);
:func:`begin` refuses one, so an incremental update never builds on half-written data.

Atomicity and ordering: a sequence number must be read and written as one aligned 8-byte
access. ``struct.pack_into`` zeroes the field *before* converting and writing the value, so
other processes see a transient 0 (31% of loads against a tight writer, measured), and ``<Q``
moves bytes one by one. A reader whose two loads both catch such a zero (even, equal) accepts
torn data: we measured ~1 torn snapshot in 40,000 reads that way. So :func:`store` writes one
8-byte slice (a single memcpy: 8-byte moves in glibc and musl) and :func:`load` uses the
native ``Q`` unpack (one 8-byte memcpy). x86-64 keeps stores in order and loads in order (TSO)
and the calls are opaque to the C compiler, which is all a seqlock needs; weakly ordered CPUs
(arm64) would need fences Python cannot issue: the appliance targets x86-64, little-endian like
the layout.

Fault points (tests arm them in the writer's process; unarmed they cost one dict test)::

    partition.publish.mid_write   publish_partition: sequence odd, body half written
    worker.live.mid_write         heartbeat/counters: sequence odd, body written
    out.mid_write                 fetch-out cell: sequence odd, cell written
"""

from __future__ import annotations

import struct
import sys
import time
from collections.abc import Callable

from .layout import SEQ_BYTES

SPINS = 64  # tight retries before the slow path starts sleeping
DEFAULT_TIMEOUT_S = 0.25

assert sys.byteorder == "little", "the region's layout is little-endian"
U64 = struct.Struct("Q")  # native: unpack is one memcpy (one 8-byte load); see store()
_unpack = U64.unpack_from
_pack_u64 = U64.pack


def load(buf, offset: int) -> int:
    """One atomic 8-byte load of a sequence number (or the header's generation)."""
    return _unpack(buf, offset)[0]


def store(buf, offset: int, value: int) -> None:
    """One atomic 8-byte store (see the module docstring for why not ``pack_into``)."""
    buf[offset:offset + 8] = _pack_u64(value)


_pack = store
_stuck: dict[tuple[int, int], int] = {}  # (id(buf), offset) -> odd seq a timed-out read saw


class TornEntryError(Exception):
    """An entry stayed mid-update past the read timeout: its writer died (or hangs) between
    the two sequence bumps. The entry's owner must rewrite it; other entries are unaffected.
    ``what`` names the entry; callers that know more (a slot's topic) replace it."""

    def __init__(self, what: str, offset: int, seq: int, *, waited_s: float = 0.0):
        super().__init__(what, offset, seq)
        self.what, self.offset, self.seq, self.waited_s = what, offset, seq, waited_s

    def __str__(self) -> str:
        if self.seq & 1:
            reason = (f"left mid-update (sequence {self.seq} is odd) by a writer that died or "
                      f"hangs; its owner must rewrite it")
        else:
            reason = f"changed on every read for {self.waited_s:.3f} s (sequence {self.seq})"
        return f"{self.what} at offset {self.offset}: {reason}"


def read(buf, offset: int, size: int, what: str = "entry",
         timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """A consistent copy of the body of the entry at ``offset`` (``size`` bytes including the
    sequence). Raises TornEntryError after ``timeout_s`` (at once for a known-stuck entry)."""
    start = offset + SEQ_BYTES
    end = offset + size
    for _ in range(SPINS):
        seq = _unpack(buf, offset)[0]
        if not seq & 1:
            data = buf[start:end]
            if _unpack(buf, offset)[0] == seq:
                return data
    return read_span(buf, offset, start, end, what, timeout_s)[1]


def read_span(buf, seq_offset: int, start: int, end: int, what: str = "entry",
              timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, bytes]:
    """(even sequence, bytes [start, end)) read consistently under the sequence at
    ``seq_offset``: one cell of a table that shares a sequence, or a whole entry. Sleeps
    between rounds of retries (a live writer finishes in microseconds)."""
    key = (id(buf), seq_offset)
    seq = _unpack(buf, seq_offset)[0]
    if seq & 1 and _stuck.get(key) == seq:
        raise TornEntryError(what, seq_offset, seq)
    began = time.monotonic()
    delay = 0.0
    while True:
        for _ in range(SPINS):
            seq = _unpack(buf, seq_offset)[0]
            if not seq & 1:
                data = buf[start:end]
                if _unpack(buf, seq_offset)[0] == seq:
                    if _stuck:
                        _stuck.pop(key, None)
                    return seq, data
        waited = time.monotonic() - began
        if waited >= timeout_s:
            if seq & 1:
                _stuck[key] = seq
            raise TornEntryError(what, seq_offset, seq, waited_s=waited)
        time.sleep(delay)
        delay = min(delay * 2 or 0.0001, 0.005)


def is_torn(buf, offset: int) -> bool:
    """True if the entry is mid-update right now (a dead writer's entry stays so)."""
    return bool(_unpack(buf, offset)[0] & 1)


def begin(buf, offset: int, what: str = "entry") -> int:
    """Start an update: make the sequence odd and return it. Raises TornEntryError if it is
    already odd (a previous writer died mid-update: repair with begin_repair instead)."""
    seq = _unpack(buf, offset)[0]
    if seq & 1:
        raise TornEntryError(what, offset, seq)
    _pack(buf, offset, seq + 1)
    return seq + 1


def begin_repair(buf, offset: int) -> int:
    """Start a full rewrite whatever state the entry is in; returns the odd sequence (a fresh
    one even over a stuck odd value, so readers that gave up on that value wait again)."""
    seq = _unpack(buf, offset)[0]
    odd = seq + 2 if seq & 1 else seq + 1
    _pack(buf, offset, odd)
    return odd


def end(buf, offset: int, odd_seq: int) -> None:
    """Finish an update begun with begin/begin_repair: publish the next even sequence."""
    _pack(buf, offset, odd_seq + 1)


# -- fault points --------------------------------------------------------------------------------

POINTS = frozenset({"partition.publish.mid_write", "worker.live.mid_write", "out.mid_write"})
armed: dict[str, Callable[[], None]] = {}  # writers test `if armed:` before calling fire();
#                                           never rebound (disarm clears it): importers alias it


def arm(name: str, action: Callable[[], None]) -> None:
    """Run ``action`` (e.g. SIGKILL this process, or sleep) when a writer passes ``name``."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(sorted(POINTS))}")
    armed[name] = action


def disarm() -> None:
    armed.clear()


def fire(name: str) -> None:
    action = armed.get(name)
    if action is not None:
        action()
