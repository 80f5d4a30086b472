"""The cleaner's compiled key passes and offset table (klog/protocol/_recordsc_keys.c) against
their pure path (appliance/segments/key_passes.py, a dict keyed by the key bytes) on the same
seeded inputs: the same kept records, bytes and timestamps per batch, the same cleaned
segments byte for byte, the same prefix cleaned when the keys outgrow the dedupe buffer; and
the compiled map pass allocates no Python object per record. Skipped, saying so, when the
compiled codec is not in use (KLOG_PURE_PYTHON=1 runs the pure path in every other test).
"""

from __future__ import annotations

import mmap
import os
import random
import tracemalloc
from pathlib import Path

import pytest

from appliance.segments import PartitionLog, cleaner
from appliance.segments.cleaner import CleanerSettings, clean
from appliance.segments.key_passes import kept_records, map_batch
from appliance.segments.offset_map import DIGESTS_AVAILABLE, OffsetMap
from klog.protocol import record_batch as rb
from klog.protocol.records import build_batch
from klog.protocol.records_codec import FALLBACK_REASON, key_digest, table_get, table_put

from .logs import SMALL, write_updates

pytestmark = pytest.mark.skipif(not DIGESTS_AVAILABLE, reason=FALLBACK_REASON)


def test_the_digest_is_siphash_2_4():
    """The reference vectors of SipHash-2-4 (key 00..0f; 64- and 128-bit outputs)."""
    key = bytes(range(16))
    assert key_digest(b"", key, 8).hex() == "310e0edd47db6f72"
    assert key_digest(bytes(range(15)), key, 8).hex() == "e545be4961ca29a1"
    assert key_digest(b"", key, 16).hex() == "a3817f04ba25a8e66df67214c7550293"


def _random_batches(rng: random.Random, count: int) -> list[bytes]:
    keys = [None, b"", b"k" * 300] + [b"key-%d" % n for n in range(12)]
    batches, offset = [], 0
    for _ in range(count):
        records = []
        for _ in range(rng.randrange(1, 9)):
            headers = [(rng.choice(["h", "é", "日本"]), rng.choice([None, b"", b"v" * 200]))
                       for _ in range(rng.choice([0, 0, 1, 3]))]
            value = None if rng.random() < 0.2 else os.urandom(rng.choice([0, 5, 150]))
            records.append((rng.randrange(0, 5_000), rng.choice(keys), value, headers))
        batch = build_batch(records, base_offset=offset, codec=rng.choice([0, 0, 1]),
                            timestamp_type=rng.choice([0, 0, 1]), now_ms=4_000)
        batches.append(batch)
        offset += len(records) + rng.choice([0, 0, 2])
    return batches


def _passes(batches: list[bytes], digests: bool, first_dirty: int, latest: int,
            horizon: int) -> list:
    offset_map = OffsetMap(1 << 20, digests=digests)
    for batch in batches:
        map_batch(batch, 0, rb.read_header(batch), offset_map, first_dirty)
    offset_map.latest_offset = latest
    out = []
    for batch in batches:
        kept, body, max_ts = kept_records(batch, 0, rb.read_header(batch), offset_map, horizon)
        out.append((kept, body, max_ts if kept else None))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_both_paths_keep_the_same_records(seed):
    rng = random.Random(seed)
    batches = _random_batches(rng, 60)
    last = rb.read_header(batches[-1]).last_offset
    for _ in range(4):
        args = (rng.randrange(0, last // 2), rng.randrange(last // 2, last + 1),
                rng.choice([0, 2_500, 10_000]))
        compiled = _passes(batches, True, *args)
        assert compiled == _passes(batches, False, *args)
        assert any(0 < kept < rb.read_header(b).records_count
                   for (kept, _, _), b in zip(compiled, batches, strict=True))


def test_bytes_the_encoder_would_not_write_take_the_pure_path():
    """A record attributes byte that is not 0 is legal, but encoding the record again writes
    0: the compiled pass declines the batch and the pure path re-encodes it."""
    batch = bytearray(build_batch([(1, b"a", b"1", ()), (2, b"a", b"2", ()),
                                   (3, b"b", b"3", ())]))
    batch[rb.HEADER_BYTES + 1] = 0x05  # the first record's attributes (after a 1-byte length)
    batch = bytes(batch)
    results = [_passes([batch], digests, 0, 2, 0) for digests in (True, False)]
    assert results[0] == results[1]
    assert results[0][0][0] == 2


@pytest.mark.parametrize("seed", range(4))
def test_the_cleaned_log_is_the_same_bytes_on_both_paths(tmp_path, monkeypatch, seed):
    """Seed 3: 2000 keys, so the table grows (moves its entries) while it maps."""
    updates, keys = (3000, 2000) if seed == 3 else (600, 40)
    logs = []
    for digests in (True, False):
        monkeypatch.setattr(cleaner, "OffsetMap",
                            lambda size, d=digests, **kw: OffsetMap(size, digests=d, **kw))
        directory = str(tmp_path / f"{digests}-0")
        plog = PartitionLog.open(directory, SMALL, now_ms=0)
        write_updates(plog, updates, keys, seed=seed, per_batch=5, codec=seed % 2,
                      tombstone_every=7)
        plog.roll(now_ms=2_000)
        clean(plog, checkpoint=None, now_ms=2_500,
              settings=CleanerSettings(dedupe_buffer_bytes=24 * 100 if seed == 2 else 1 << 20))
        logs.append([Path(s.path).read_bytes() for s in plog.segments])
        plog.close()
    assert logs[0] == logs[1]
    assert sum(map(len, logs[0])) > 0


def test_the_offset_table_maps_digests_to_offsets():
    """Put, get, and the errors of a caller that breaks the contract."""
    sip_key = os.urandom(16)
    table = bytearray(24 * 4)
    assert table_put(table, b"a", 5, sip_key) is True
    assert table_put(table, b"a", 9, sip_key) is False  # the latest offset wins
    assert table_put(table, b"", 0, sip_key) is True
    assert table_put(table, b"c", 2**63 - 1, sip_key) is True
    assert [table_get(table, k, sip_key) for k in (b"a", b"", b"c", b"d")] == [9, 0, 2**63 - 1,
                                                                               -1]
    assert table_get(table, b"a", os.urandom(16)) == -1  # another run's digests
    assert table_put(table, b"d", 1, sip_key) is True
    with pytest.raises(RuntimeError):  # full: the map's load factor never lets it be
        table_put(table, b"e", 1, sip_key)
    with pytest.raises(ValueError):
        table_put(table, b"a", -1, sip_key)
    with pytest.raises(BufferError):
        table_get(bytes(24), b"a", sip_key)  # not writable
    with pytest.raises(TypeError):
        table_get(bytearray(25), b"a", sip_key)


def test_the_table_grows_with_the_keys_within_the_buffer():
    small = OffsetMap(128 << 20, expected_keys=5000)
    assert (small.capacity, small.max_slots, small.slots) == (5000, 5556, 1024)
    for n in range(5000):
        small.put(b"key-%d" % n, n)
    assert (len(small), small.slots, len(small.table)) == (5000, 5556, 24 * 5556)
    assert [small.get(b"key-%d" % n) for n in range(0, 5000, 7)] == list(range(0, 5000, 7))
    small.close()
    full = OffsetMap(24 * 100, expected_keys=10**9)
    assert (full.capacity, full.max_slots) == (90, 100)  # Kafka's: slots * 0.9
    full.close()
    assert OffsetMap(24 * 100, digests=False).capacity == 90


def test_a_run_maps_no_more_memory_than_its_dirty_section_needs(tmp_path, monkeypatch):
    maps = []

    def recording(size, **kw):
        maps.append(OffsetMap(size, **kw))
        return maps[-1]

    monkeypatch.setattr(cleaner, "OffsetMap", recording)
    plog = PartitionLog.open(str(tmp_path / "t-0"), SMALL, now_ms=0)
    write_updates(plog, 300, 20)
    plog.roll(now_ms=2_000)
    clean(plog, checkpoint=None, now_ms=2_500)  # the 128 MiB default buffer
    plog.close()
    assert maps[0].capacity <= 300 and len(maps[0]) == 20 and maps[0].slots == 300 // 0.9 + 1
    assert maps[0].table.closed  # given back when the run ends


def _peak_bytes(digests: bool) -> tuple[int, int]:
    """The most memory Python held while the map pass, then the rewrite pass, ran over one
    batch of 3000 new keys."""
    batch = build_batch([(1, b"key-%d" % n, b"v", ()) for n in range(3000)])
    header = rb.read_header(batch)
    peaks = []
    with OffsetMap(1 << 20, digests=digests) as offset_map:
        tracemalloc.start()
        try:
            map_batch(batch, 0, header, offset_map, 0)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.reset_peak()
            offset_map.latest_offset = header.last_offset
            assert kept_records(batch, 0, header, offset_map, 0)[0] == 3000
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(offset_map) == 3000
    return peaks[0], peaks[1]


def test_the_compiled_passes_make_no_object_per_record():
    mapping, rewriting = _peak_bytes(True)
    assert mapping < 4096
    assert rewriting < 3000 * 16 + 4096  # its one array of kept spans: 16 bytes a record
    assert min(_peak_bytes(False)) > 3000 * 100  # tuples, keys, values, ints


@pytest.mark.parametrize("seed", range(3))
def test_keys_past_the_buffer_clean_the_same_prefix_on_both_paths(tmp_path, monkeypatch, seed):
    """More distinct keys in the dirty section than the buffer holds: both paths clean the
    prefix that fits (Kafka's buildOffsetMap), to the same offset and bytes, run after run."""
    logs = []
    for digests in (True, False):
        monkeypatch.setattr(cleaner, "OffsetMap",
                            lambda size, d=digests, **kw: OffsetMap(size, digests=d, **kw))
        plog = PartitionLog.open(str(tmp_path / f"{digests}-0"), SMALL, now_ms=0)
        write_updates(plog, 800, 300, seed=seed, per_batch=4, tombstone_every=11)
        plog.roll(now_ms=2_000)
        settings = CleanerSettings(dedupe_buffer_bytes=24 * 100)  # 90 keys
        checkpoint, steps = None, []
        for _ in range(3):
            result = clean(plog, checkpoint=checkpoint, now_ms=2_500, settings=settings,
                           force=True)
            checkpoint = result.cleaned_through
            steps.append(checkpoint)
        logs.append((steps, [Path(s.path).read_bytes() for s in plog.segments]))
        plog.close()
    assert logs[0] == logs[1]
    assert 0 < logs[0][0][0] < logs[0][0][1] < logs[0][0][2]


def test_an_anonymous_mapping_is_a_table():
    """The map's table as the C sees it: a zeroed writable buffer."""
    table = mmap.mmap(-1, 24 * 8)
    assert table_put(table, b"k", 3, bytes(16)) and table_get(table, b"k", bytes(16)) == 3
    table.close()
