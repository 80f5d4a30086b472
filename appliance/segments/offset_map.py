"""The cleaner's map from a record key to the offset of its latest record (Kafka's OffsetMap).

Built over the dirty section of a log, oldest to newest, so the last ``put`` of a key wins.
Its capacity comes from ``log.cleaner.dedupe.buffer.size`` the way Kafka sizes its
``SkimpyOffsetMap``: 24 bytes an entry (a 16-byte digest and an 8-byte offset) filled to 90%.
klog keys the dict by the key's bytes (a bytes object per distinct key, not per record);
the budget counts entries, so the bound an operator sets means the same number of keys as in
Kafka. When the map is full the cleaner stops mapping there (``latest_offset`` says where):
records past it are kept as they are, and the next run carries on from that offset.
"""

from __future__ import annotations

ENTRY_BYTES = 24  # Kafka's: an MD5 digest and an offset
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default


class OffsetMap:
    def __init__(self, buffer_bytes: int):
        self.capacity = max(1, int(buffer_bytes // ENTRY_BYTES * LOAD_FACTOR))
        # key -> offset; the cleaner's loops use the dict itself (a method call per record
        # costs as much as the rest of the record's work)
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset mapped (-1: none)

    def __len__(self) -> int:
        return len(self.offsets)

    def room_for(self, count: int) -> bool:
        """Whether ``count`` more keys fit (the cleaner asks before each batch)."""
        return len(self.offsets) + count <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self.offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when it was not mapped."""
        return self.offsets.get(key, -1)

    def clear(self) -> None:
        self.offsets.clear()
        self.latest_offset = -1
