"""The consumer's decode with the cyclic GC paused (issue 26): same records, GC state kept.

`klog.consumer.records.decode` turns the GC off while one fetch is decoded (young
collections promoting the fetch's earlier batches were half the cost of a consumed record).
These tests pin what the pause must not change: the records are those decoded with the GC
on, the GC is on again afterwards (also when the fetch is corrupt), and a GC the
application turned off stays off. No broker; well under a second.
"""

from __future__ import annotations

import gc

import pytest

from klog.consumer.records import CompletedFetch, _decode, decode
from klog.protocol.record_batch import CorruptBatchError
from klog.protocol.records import build_batch
from klog.types import TopicPartition

TP = TopicPartition("t", 0)


def fetch_of(batches: int = 3, per_batch: int = 500, start: int = 0) -> CompletedFetch:
    data = b"".join(
        build_batch([(1_000 + i, b"k%d" % i if i % 3 else None, b"v" * (i % 50),
                      [("h", b"x")] if i % 7 == 0 else []) for i in range(per_batch)],
                    base_offset=b * per_batch, now_ms=1)
        for b in range(batches))
    return CompletedFetch(TP, start, data, batches * per_batch, 0)


@pytest.fixture
def gc_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_decode_gives_the_records_of_a_decode_with_the_gc_on(gc_on):
    fetch = fetch_of(start=123)  # from the middle of the first batch
    ours = decode(fetch)
    assert ours == _decode(fetch, True, None, None)
    assert [r.offset for r in ours] == list(range(123, 1_500))
    assert gc.isenabled()
    assert all(gc.is_tracked(r) for r in ours)  # handed back to the collector


def test_the_gc_is_on_again_after_a_corrupt_fetch(gc_on):
    fetch = fetch_of(batches=1)
    broken = bytearray(fetch.data)
    broken[-1] ^= 0xFF  # the CRC no longer matches
    fetch.data = bytes(broken)
    with pytest.raises(CorruptBatchError):
        decode(fetch)
    assert gc.isenabled()


def test_a_gc_the_application_turned_off_stays_off(gc_on):
    gc.disable()
    assert len(decode(fetch_of(batches=1))) == 500
    assert not gc.isenabled()


def test_deserializers_still_apply_with_the_gc_paused(gc_on):
    records = decode(fetch_of(batches=1), value_deserializer=len, key_deserializer=bytes.upper)
    assert records[1].value == 1 and records[1].key == b"K1" and records[0].key is None
    assert gc.isenabled()
