"""The cleaner's map from a record key to the offset of its latest record (Kafka's OffsetMap).

Built over the dirty section of a log, oldest to newest, so the last ``put`` of a key wins.
Its capacity comes from ``log.cleaner.dedupe.buffer.size`` the way Kafka sizes its
``SkimpyOffsetMap``: 24 bytes an entry (a 16-byte digest and an 8-byte offset) filled to 90%.
When the map is full the cleaner stops mapping there (``latest_offset`` says where): records
past it are kept as they are, and the next run carries on from that offset.

Two ways to key it, chosen once per map (``digests``):

- by a 16-byte digest of the key (SipHash-2-4-128 under ``sip_key``, 16 random bytes drawn
  per map), when the compiled codec is built: its passes (``key_passes``) hash the key bytes
  in place, with no bytes object per key, and a digest bounds an entry's size as Kafka's MD5
  does. The digest is keyed and secret, so no producer can build two keys that collide (it
  could with MD5); a chance collision among n keys has probability about n^2 / 2^129;
- by the key's bytes (exact), on the pure-Python path (``KLOG_PURE_PYTHON=1``, or no
  compiled codec): the reference the compiled path is tested against.

The budget counts entries either way, so the bound an operator sets means the same number
of keys as in Kafka.
"""

from __future__ import annotations

import os

from klog.protocol.records_codec import key_digest

ENTRY_BYTES = 24  # Kafka's: an MD5 digest and an offset
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
DIGESTS_AVAILABLE = key_digest is not None


class OffsetMap:
    def __init__(self, buffer_bytes: int, digests: bool = DIGESTS_AVAILABLE):
        self.capacity = max(1, int(buffer_bytes // ENTRY_BYTES * LOAD_FACTOR))
        # key (or its digest) -> offset; the cleaner's loops use the dict itself (a method
        # call per record costs as much as the rest of the record's work)
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset mapped (-1: none)
        self.sip_key = os.urandom(16) if digests and DIGESTS_AVAILABLE else None

    def __len__(self) -> int:
        return len(self.offsets)

    def key_of(self, key: bytes) -> bytes:
        """What the dict is keyed by for ``key``: its digest, or itself."""
        return key if self.sip_key is None else key_digest(key, self.sip_key, 16)

    def room_for(self, count: int) -> bool:
        """Whether ``count`` more keys fit (the cleaner asks before each batch)."""
        return len(self.offsets) + count <= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self.offsets[self.key_of(key)] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 when it was not mapped."""
        return self.offsets.get(self.key_of(key), -1)

    def clear(self) -> None:
        self.offsets.clear()
        self.latest_offset = -1
