"""Offset and time indexes: lookup (largest entry <= target), truncation, seal/activate, damage."""

from __future__ import annotations

import os

import pytest

from appliance.segments.index import IndexFullError, OffsetIndex, TimeIndex

BASE = 1000


def _offset_index(tmp_path, entries, max_bytes=800):
    index = OffsetIndex(str(tmp_path / "x.index"), BASE, max_bytes)
    index.load(active=True, max_relative_offset=2**31 - 1, max_position=2**31 - 1)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_lookup_finds_the_largest_entry_at_or_below(tmp_path):
    index = _offset_index(tmp_path, [(1010, 100), (1020, 250), (1030, 400)])
    assert index.lookup(999) == (BASE, 0)
    assert index.lookup(1009) == (BASE, 0)
    assert index.lookup(1010) == (1010, 100)
    assert index.lookup(1025) == (1020, 250)
    assert index.lookup(10**9) == (1030, 400)
    assert index.lookup_position(249) == (1010, 100)
    assert index.lookup_position(250) == (1020, 250)
    index.close()


def test_full_index_refuses_appends(tmp_path):
    index = _offset_index(tmp_path, [(BASE + i, 10 * i) for i in range(1, 3)], max_bytes=16)
    assert index.is_full
    with pytest.raises(IndexFullError):
        index.append(BASE + 5, 100)
    index.close()


def test_truncate_seal_and_reload(tmp_path):
    index = _offset_index(tmp_path, [(BASE + i, 10 * i) for i in range(1, 11)])
    index.truncate_to(BASE + 6)  # removes entries with offset >= 1006
    assert index.entries == 5 and index.lookup(10**9) == (1005, 50)
    index.seal()
    assert os.path.getsize(index.path) == 5 * 8  # trimmed
    index.close()
    again = OffsetIndex(index.path, BASE, 800)
    again.load(active=False, max_relative_offset=100, max_position=1000)
    assert again.entries == 5 and not again.damaged
    again.activate()
    again.append(BASE + 7, 70)
    assert again.entries == 6 and os.path.getsize(index.path) == 800
    again.close()


def test_preallocated_file_ends_at_the_first_zero_entry(tmp_path):
    index = _offset_index(tmp_path, [(BASE + i, 10 * i) for i in range(1, 8)])
    index.close()
    assert os.path.getsize(index.path) == 800
    again = OffsetIndex(index.path, BASE, 800)
    again.load(active=True, max_relative_offset=100, max_position=1000)
    assert again.entries == 7 and not again.damaged
    again.close()


def test_garbled_and_out_of_bounds_entries_are_dropped(tmp_path):
    index = _offset_index(tmp_path, [(BASE + i, 10 * i) for i in range(1, 8)])
    index.seal()
    index.close()
    with open(index.path, "r+b") as f:
        f.seek(8 * 4)
        f.write(b"\xff" * 8)  # entry 4 no longer increases
    again = OffsetIndex(index.path, BASE, 800)
    again.load(active=False, max_relative_offset=100, max_position=1000)
    assert again.entries == 4 and again.damaged
    again.close()
    third = OffsetIndex(index.path, BASE, 800)
    third.load(active=False, max_relative_offset=100, max_position=35)  # positions must be < 35
    assert third.entries == 3 and third.damaged
    third.close()


def test_time_index(tmp_path):
    index = TimeIndex(str(tmp_path / "x.timeindex"), BASE, 120)
    index.load(active=True, max_relative_offset=100, max_position=1)
    index.maybe_append(500, 1003)
    index.maybe_append(500, 1005)  # not larger: skipped
    index.maybe_append(-1, 1006)  # no timestamp: skipped
    index.maybe_append(700, 1008)
    assert index.entries == 2
    assert index.lookup(499) == (-1, BASE)
    assert index.lookup(600) == (500, 1003)
    assert index.last_entry() == (700, 1008)
    index.truncate_to(1008)
    assert index.last_entry() == (500, 1003)
    index.close()
