"""The cleaner's map from a record key to the offset of its latest record (Kafka's OffsetMap).

Built over the dirty section of a log, oldest to newest, so the last ``put`` of a key wins.
Its capacity comes from ``log.cleaner.dedupe.buffer.size`` the way Kafka sizes its
``SkimpyOffsetMap``: 24 bytes an entry (a 16-byte digest and an 8-byte offset) filled to 90%.
When the map is full the cleaner stops mapping there (``latest_offset`` says where): records
past it are kept as they are, and the next run carries on from that offset (Kafka's
``buildOffsetMap``: only the prefix of the dirty section that fits is cleaned).

Two ways to hold it, chosen once per map (``digests``):

- an offset table (``table``), when the compiled codec is built: Kafka's SkimpyOffsetMap, a
  buffer of 24-byte slots (a digest of the key, SipHash-2-4-128 under ``sip_key``, 16 random
  bytes drawn per map, and the offset), open addressing, read and written only by the C
  (``_recordsc_keys.c``). Its passes (``key_passes``) hash each key where it lies in the batch
  and probe the table, with no Python object per record. The digest is keyed and secret, so
  no producer can build two keys that collide (it could with MD5); a chance collision among
  n keys has probability about n^2 / 2^129;
- a dict keyed by the key's bytes (exact), on the pure-Python path (``KLOG_PURE_PYTHON=1``, or
  no compiled codec): the reference the compiled path is tested against.

The budget counts entries either way, so the bound an operator sets means the same number
of keys as in Kafka. Kafka allocates the whole buffer once per cleaner thread (192 MB of
heap for its defaults); this table starts small and grows as keys come (doubling, its
entries moved by the C, never past the budget, nor past what ``expected_keys`` needs: the
cleaner passes the dirty section's offset span, which no count of its keys can exceed), so
its memory follows the distinct keys of the run; it is an anonymous mapping, which
:meth:`close` gives back when the run ends.
"""

from __future__ import annotations

import math
import mmap
import os

from klog.protocol.records_codec import key_digest, table_get, table_move, table_put

ENTRY_BYTES = 24  # Kafka's: an MD5 digest and an offset (here a SipHash-128 digest)
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
FIRST_SLOTS = 1024  # 24 KiB: where a table starts before it grows
DIGESTS_AVAILABLE = key_digest is not None


class OffsetMap:
    def __init__(self, buffer_bytes: int, digests: bool = DIGESTS_AVAILABLE, *,
                 expected_keys: int | None = None):
        budget_slots = max(2, buffer_bytes // ENTRY_BYTES)
        capacity = max(1, int(budget_slots * LOAD_FACTOR))
        if expected_keys is not None:
            capacity = max(1, min(capacity, expected_keys))
        self.capacity = capacity
        self.latest_offset = -1  # the last offset mapped (-1: none)
        self.sip_key = os.urandom(16) if digests and DIGESTS_AVAILABLE else None
        # key -> offset on the pure path: the cleaner's loops use the dict itself (a method
        # call per record costs as much as the rest of the record's work)
        self.offsets: dict[bytes, int] | None = None
        self.table: mmap.mmap | None = None
        self.entries = 0  # keys in the table (the passes add what they insert)
        if self.sip_key is None:
            self.offsets = {}
        else:
            # at least one slot stays empty: every probe ends
            self.max_slots = min(budget_slots, max(capacity + 1,
                                                   math.ceil(capacity / LOAD_FACTOR)))
            self.slots = min(self.max_slots, FIRST_SLOTS)
            self.table = mmap.mmap(-1, self.slots * ENTRY_BYTES)  # zeroed: all slots empty

    def __len__(self) -> int:
        return self.entries if self.offsets is None else len(self.offsets)

    def __enter__(self) -> OffsetMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def room_for(self, count: int) -> bool:
        """Whether ``count`` more keys fit (the cleaner asks before each batch)."""
        return len(self) + count <= self.capacity

    def reserve(self, count: int) -> None:
        """Grow the table, if it must, so that ``count`` more keys keep it within its load
        factor (the caller checked ``room_for``). Raises OSError (no memory)."""
        if self.table is None or self.slots == self.max_slots:
            return
        needed = self.entries + count
        if needed <= int(self.slots * LOAD_FACTOR):
            return
        slots = min(self.max_slots, max(2 * self.slots, math.ceil(needed / LOAD_FACTOR)))
        table = mmap.mmap(-1, slots * ENTRY_BYTES)
        table_move(self.table, table)
        self.table.close()
        self.table, self.slots = table, slots

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset`` (the caller checked ``room_for``)."""
        if self.offsets is not None:
            self.offsets[key] = offset
        else:
            self.reserve(1)
            self.entries += table_put(self.table, key, offset, self.sip_key)
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when it was not mapped."""
        if self.offsets is not None:
            return self.offsets.get(key, -1)
        return table_get(self.table, key, self.sip_key)

    def close(self) -> None:
        """Give the table's memory back (the map is unusable after)."""
        if self.table is not None:
            self.table.close()
