"""Which partition a record goes to: the Java client's rules, as pure decisions.

- An explicit partition wins.
- A record with a key goes to ``murmur2(key) % partitions`` (``klog.protocol.partitioner``), so
  it lands where the Java client, librdkafka's ``murmur2_random`` and kafka-python put it. The
  hash runs in Python, so answers are cached per topic (keys repeat: user ids, hosts).
- A record without a key sticks to one partition for a whole batch, then moves to the next
  (KIP-480's sticky partitioner): full batches, fewer requests, an even spread over time.
  The accumulator keeps the sticky batch; this class only says where to move next.
"""

from __future__ import annotations

import random

from klog.protocol.partitioner import partition_for_key

KEY_CACHE_ENTRIES = 65_536


class Partitioner:
    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._keys: dict[str, tuple[int, dict[bytes, int]]] = {}

    def for_key(self, topic: str, key: bytes, count: int) -> int:
        cached = self._keys.get(topic)
        if cached is None or cached[0] != count or len(cached[1]) >= KEY_CACHE_ENTRIES:
            cached = self._keys[topic] = (count, {})
        partitions = cached[1]
        partition = partitions.get(key)
        if partition is None:
            partition = partitions[bytes(key)] = partition_for_key(bytes(key), count)
        return partition

    def next_sticky(self, topic: str, count: int) -> int:
        """Move ``topic``'s sticky partition on (its batch is full or gone)."""
        current = self._sticky.get(topic)
        partition = self._rng.randrange(count) if current is None else (current + 1) % count
        self._sticky[topic] = partition
        return partition
