"""Fixtures for the shm tests: unique region names, cleaned up even when a test fails."""

from __future__ import annotations

import os

import pytest

from appliance.shm import Geometry, region_name, unlink_region

SMALL = Geometry(max_workers=4, max_partitions=64, index_entries=8)


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm"))


@pytest.fixture
def shm_name(tmp_path):
    """A region name of its own (derived from tmp_path), unlinked after the test."""
    name = region_name(7, tmp_path / "disk0")
    yield name
    unlink_region(name)


@pytest.fixture
def buffer():
    """A zeroed bytearray laid out like a region: the tables work on any buffer."""
    return bytearray(SMALL.total_bytes)
