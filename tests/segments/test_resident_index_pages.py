"""Opening a log leaves none of its index pages resident in the process (issue 26): an unclean
restart of 5,000 partitions per worker kept 341 MB of index pages in each worker's RSS
against 90 MB before. Recovery and attach let go of what they faulted in
(`LogSegment.drop_index_pages`); what they wrote to the indexes is still there (the pages
stay in the page cache), and reads, lookups and appends go on. Residency is read from this
process's own /proc/self/smaps, per mapped index file."""

from __future__ import annotations

import dataclasses
import random

import pytest

from .batches import random_batch, with_base_offset
from .conftest import SMALL, crash

# indexes of 16 pages (preallocated for the active segment), entries every 256 bytes
CONFIG = dataclasses.replace(SMALL, segment_bytes=16 * 1024, segment_index_bytes=64 * 1024)


def resident_index_kb(log_dir: str) -> dict[str, int]:
    """Per mapped .index / .timeindex file of `log_dir`: the kB of it resident in this
    process (smaps' Rss of each of its mappings)."""
    out: dict[str, int] = {}
    path = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's header: range, perms, ..., [path]
                name = fields[5] if len(fields) >= 6 else ""
                path = name if name.startswith(log_dir) and \
                    name.endswith((".index", ".timeindex")) else None
            elif path is not None and fields[0] == "Rss:":
                out[path] = out.get(path, 0) + int(fields[1])
    return out


def fill(log, count: int, seed: int) -> list:
    rng, sent = random.Random(seed), []
    for _ in range(count):
        batch = random_batch(rng)
        sent.append((log.append(batch, now_ms=0).base_offset, batch))
    return sent


def readable(log, sent) -> None:
    for offset, batch in sent:
        assert log.read(offset, 1).read() == with_base_offset(batch, offset)


@pytest.fixture
def killed(open_log, log_dir):
    """A log of a few segments, its active one with a written index, left as a SIGKILL
    leaves it; (what was sent, the attach point it published)."""
    log = open_log(CONFIG)
    sent = fill(log, 200, seed=1)
    assert len(log.segments.all_including_retired()) >= 2
    assert resident_index_kb(log_dir), "the writer's own indexes should be mapped and resident"
    point = log.snapshot().attach_point()
    crash(log)
    return sent, point


@pytest.mark.parametrize("verify", ["tail", "full"])
def test_recovery_keeps_no_index_page_resident(killed, open_log, log_dir, verify):
    sent, _ = killed
    log = open_log(CONFIG, verify=verify)
    assert not log.recovery.clean_shutdown
    mapped = resident_index_kb(log_dir)
    assert mapped, "the active segment's indexes are mapped for appends"
    assert sum(mapped.values()) == 0, mapped
    readable(log, sent)  # lookups fault in what they need: the entries recovery kept
    more = fill(log, 30, seed=2)
    readable(log, sent + more)


def test_an_attach_keeps_no_index_page_resident(killed, open_log, log_dir):
    sent, point = killed
    log = open_log(CONFIG, attach=point)
    assert log.recovery.attached, str(log.recovery)
    assert sum(resident_index_kb(log_dir).values()) == 0
    readable(log, sent)
    more = fill(log, 30, seed=2)
    readable(log, sent + more)


def test_index_entries_written_by_recovery_survive_their_pages_being_dropped(
        killed, open_log, log_dir):
    """A full verify rebuilds every index (writes through the mapping, then drops the pages):
    a clean reopen afterwards finds the rebuilt entries and serves every batch."""
    sent, _ = killed
    log = open_log(CONFIG, verify="full")
    entries = [s.index.entries for s in log.segments.all_including_retired()]
    assert any(entries)
    log.close()
    again = open_log(CONFIG)
    assert again.recovery.clean_shutdown
    assert [s.index.entries for s in again.segments.all_including_retired()] == entries
    readable(again, sent)
