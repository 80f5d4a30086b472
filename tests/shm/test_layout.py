"""The binary layout: struct sizes and alignment, the size formula, the header, name fields,
and the region name derived from the config."""

from __future__ import annotations

import os

import pytest

from appliance.shm import layout, region_name
from appliance.shm.layout import LINE, PAGE, Geometry, Header


def test_struct_sizes_and_line_alignment():
    assert layout.HEADER.size == 64
    assert layout.WORKER_STATIC_BYTES == 320 and layout.WORKER_LIVE_BYTES == 64
    assert layout.WORKER_SLOT_BYTES % LINE == 0
    assert layout.PARTITION_DIR_BYTES == 320
    assert layout.PARTITION_LOG_HEAD == 96  # v3: the last stable offset and the aborted count
    assert layout.PARTITION_LOG_PUBLISH.size == layout.PARTITION_LOG.size - 4
    assert layout.OUT_CELL.size == 24 and layout.INDEX_ENTRY.size == 8


@pytest.mark.parametrize("geometry", [Geometry(), Geometry(1, 1, 1), Geometry(3, 1000, 17),
                                      Geometry(64, 65536, 64)])
def test_sections_are_aligned_and_disjoint(geometry):
    g = geometry
    assert g.partition_slot_bytes % LINE == 0 and g.out_table_bytes % LINE == 0
    assert g.partitions_offset % PAGE == 0 and g.out_offset % PAGE == 0
    assert g.total_bytes % PAGE == 0
    assert g.worker_slot(g.max_workers - 1) + layout.WORKER_SLOT_BYTES <= g.partitions_offset
    last = g.partition_slot(g.max_partitions - 1) + g.partition_slot_bytes
    assert last <= g.out_offset
    assert g.out_table(g.max_workers - 1) + g.out_table_bytes <= g.total_bytes
    ring_end = layout.PARTITION_DIR_BYTES + layout.PARTITION_LOG_HEAD + 8 * g.index_entries
    assert ring_end <= g.partition_slot_bytes


def _formula(w: int, p: int, k: int) -> int:
    """The size formula as the layout module documents it."""
    def line_up(n):
        return -(-n // LINE) * LINE

    def page_up(n):
        return -(-n // PAGE) * PAGE

    return page_up(page_up(page_up(4096 + 448 * w) + p * (320 + line_up(96 + 8 * k)))
                   + w * line_up(64 + 24 * p)) + w * 262144


@pytest.mark.parametrize("w,p,k", [(16, 16384, 64), (4, 4096, 64), (64, 65536, 64), (2, 10, 3)])
def test_size_formula(w, p, k):
    assert Geometry(w, p, k).total_bytes == _formula(w, p, k)


def test_default_size_fits_dockers_shm():
    assert Geometry().total_bytes / 2**20 == pytest.approx(25.0, abs=0.05)
    assert Geometry().total_bytes < 64 * 10**6


@pytest.mark.parametrize("kwargs", [{"max_workers": 0}, {"max_partitions": 0},
                                    {"index_entries": 0}, {"max_partitions": 1 << 23}])
def test_geometry_rejects_bad_sizes(kwargs):
    with pytest.raises(ValueError):
        Geometry(**kwargs)


def test_offsets_reject_out_of_range():
    g = Geometry(2, 3, 4)
    for call, bad in ((g.worker_slot, 2), (g.partition_slot, 3), (g.out_table, -1)):
        with pytest.raises(IndexError):
            call(bad)


def test_header_round_trip_and_magic_written_last():
    buf = bytearray(PAGE)
    header = Header(layout.MAGIC, layout.LAYOUT_VERSION, PAGE, 123 * PAGE, 5, 77, 9, -1, 4242,
                    987654321, 1_700_000_000_123)
    layout.write_header(buf, header)
    assert layout.read_header(buf) == header
    assert bytes(buf[:8]) == layout.MAGIC
    assert int.from_bytes(buf[layout.PID_OFFSET:layout.PID_OFFSET + 4], "little") == 4242


def test_name_fields():
    assert layout.encode_name("t" * 249, "topic") == b"t" * 249
    assert layout.encode_name("é" * 128, "topic") == "é".encode() * 128  # 256 bytes: fits
    with pytest.raises(ValueError, match="257 UTF-8 bytes"):
        layout.encode_name("x" * 257, "topic")
    raw = layout.encode_name("ログ", "topic")
    assert layout.decode_name(raw + b"\0" * 10, len(raw)) == "ログ"


def test_region_name_is_deterministic_and_distinct(tmp_path):
    disk = tmp_path / "disk0"
    disk.mkdir()
    name = region_name(0, disk)
    assert name.startswith("/klog-0-") and name.count("/") == 1 and len(name) < 64
    assert region_name(0, str(disk) + "/") == name
    link = tmp_path / "alias"
    link.symlink_to(disk)
    assert region_name(0, link) == name  # same disk through a symlink: same appliance
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert region_name(0, "disk0") == name
    finally:
        os.chdir(cwd)
    assert region_name(1, disk) != name
    assert region_name(0, tmp_path / "disk1") != name
    assert region_name(-1, disk).startswith("/klog--1-")
