"""Helpers for the cleaner's tests: write keyed updates into a PartitionLog, read every
record back, and the oracle a cleaned log must agree with."""

from __future__ import annotations

import random

from appliance.segments import LogConfig, PartitionLog
from klog.protocol.records import build_batch, decode_batch

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=1024,
                  retention_ms=-1, file_delete_delay_ms=0, cleanup_policy="compact",
                  min_cleanable_dirty_ratio=0.01, delete_retention_ms=1000)


def write_updates(plog: PartitionLog, count: int, keys: int, *, seed: int = 1,
                  per_batch: int = 3, now_ms: int = 1_000, codec: int = 0,
                  tombstone_every: int = 0) -> dict[bytes, tuple[int, bytes | None]]:
    """Append `count` updates over `keys` keys; returns key -> (offset, value) of the latest."""
    rng = random.Random(seed)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    n = 0
    while n < count:
        records = []
        for _ in range(min(per_batch, count - n)):
            key = b"key-%d" % rng.randrange(keys)
            value = None if tombstone_every and n % tombstone_every == 0 else b"value-%d" % n
            records.append((now_ms, key, value, ()))
            n += 1
        info = plog.append(build_batch(records, codec=codec), now_ms=now_ms)
        for i, (_, key, value, _) in enumerate(records):
            latest[key] = (info.base_offset + i, value)
    return latest


def all_records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record from the log start, in order."""
    found = []
    for where, header in plog.iter_batch_headers():
        _, records = decode_batch(plog.read_batch(where, header.size))
        found += [(r.offset, r.key, r.value, r.timestamp) for r in records]
    return found


def all_headers(plog: PartitionLog):
    return [h for _, h in plog.iter_batch_headers()]


def assert_compacted(before: list, after: list, latest: dict) -> None:
    """Every surviving record is an original one at its own offset, offsets grow, and each
    key's latest record survived."""
    original = {r[0]: r for r in before}
    offsets = [r[0] for r in after]
    assert offsets == sorted(set(offsets))
    for record in after:
        assert original[record[0]] == record
    kept = {r[0] for r in after}
    for key, (offset, value) in latest.items():
        if value is not None:
            assert offset in kept, (key, offset)
