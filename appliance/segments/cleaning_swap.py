"""Swapping a cleaned segment in for the segments it replaces, so that kill -9 at any moment
leaves a valid log (Kafka's ``.cleaned`` / ``.swap`` sequence, LogLoader's recovery).

The cleaner writes ``<base>.log.cleaned`` (and ``.index``, ``.timeindex``, ``.txnindex``
``.cleaned``), fsyncs them, and renames each to ``.swap``: from then on the cleaned segment is
durable and complete, and recovery will finish the swap. The owner then installs it:

1. each ``.swap`` file is hard-linked to a temporary name and renamed over the live name of
   the group's first segment (``<base>.log`` ...), so a reader listing the directory always
   finds that base offset, old file or new, never neither;
2. the group's later segments are renamed ``*.deleted`` (their open descriptors stay valid:
   readers mid-fetch keep reading the old bytes until they let go);
3. the ``.swap`` names are removed.

A reader that lists the directory between 1 and 2 sees the new first segment and the old
later ones: each holds valid records at their own offsets, the new one a subset of the old
range, so whatever it serves is a compacted view of the same log.

Recovery (:func:`complete_swaps`, before a log opens): ``.cleaned`` files and temporary links
are removed (the cleaning is lost, the log unchanged); a ``.swap`` is installed: the live
segments whose base lies inside its offsets (after its base) are removed, then it is renamed
over the live name. A segment of the group wholly past the cleaned one's last offset is left
as it was: old records, still valid.

What can fail: OSError.
"""

from __future__ import annotations

import contextlib
import os

from .layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    fsync_directory,
    list_segment_bases,
    segment_path,
)
from .segment import read_headers

CLEANED = ".cleaned"
SWAP = ".swap"
LINK = ".link"  # a hard link of a .swap, about to be renamed over the live name
SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX)  # .log last


def swap_paths(directory: str, base: int) -> list[tuple[str, str]]:
    """(``.swap`` path, live path) of each file of a swap that exists, the ``.log`` last."""
    pairs = []
    for suffix in SUFFIXES:
        live = segment_path(directory, base, suffix)
        if os.path.exists(live + SWAP):
            pairs.append((live + SWAP, live))
    return pairs


def promote_cleaned(directory: str, base: int) -> None:
    """``.cleaned`` -> ``.swap`` for every file of the cleaned segment (already fsynced), the
    ``.log`` last, then the directory fsynced: the swap is decided."""
    for suffix in SUFFIXES:
        path = segment_path(directory, base, suffix) + CLEANED
        if os.path.exists(path):
            os.rename(path, path[: -len(CLEANED)] + SWAP)
    fsync_directory(directory)


def discard(directory: str, base: int) -> None:
    """Remove a cleaned segment that will not be installed (its group changed meanwhile)."""
    for suffix in SUFFIXES:
        live = segment_path(directory, base, suffix)
        for path in (live + CLEANED, live + SWAP, live + SWAP + LINK):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def discard_all(directory: str) -> None:
    """Remove every cleaned or decided swap of the log (a truncation made them wrong)."""
    for name in os.listdir(directory):
        if name.endswith((CLEANED, SWAP, LINK)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def replace_live(directory: str, base: int) -> None:
    """Step 1: the swap's files over the live names of segment ``base`` (a live
    ``.txnindex`` the swap has none of is removed)."""
    for swap, live in swap_paths(directory, base):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(swap + LINK)
        os.link(swap, swap + LINK)
        os.rename(swap + LINK, live)
    txn = segment_path(directory, base, TXN_INDEX_SUFFIX)
    if not os.path.exists(txn + SWAP):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(txn)


def drop_swap_names(directory: str, base: int) -> None:
    """Step 3: the swap is installed; its ``.swap`` names go."""
    for swap, _ in swap_paths(directory, base):
        os.unlink(swap)
    fsync_directory(directory)


def complete_swaps(directory: str) -> list[str]:
    """Recovery before a log opens (see the module docstring); returns what it did, for the
    recovery report."""
    notes = []
    names = os.listdir(directory)
    for name in names:
        if name.endswith((CLEANED, LINK)):
            os.unlink(os.path.join(directory, name))
            notes.append(f"removed {name} (a cleaning interrupted before its swap)")
    for base in _swap_bases(names):
        swap_log = segment_path(directory, base, LOG_SUFFIX) + SWAP
        end = _next_offset(swap_log, base)
        for other in list_segment_bases(directory):
            if base < other < end:
                for suffix in SUFFIXES:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(segment_path(directory, other, suffix))
        for swap, live in swap_paths(directory, base):
            if os.path.exists(live) and os.path.samefile(swap, live):
                os.unlink(swap)  # step 1 was done: rename() between two links does nothing
            else:
                os.rename(swap, live)
        notes.append(f"completed the swap of cleaned segment {base} (offsets up to {end})")
    if notes:
        fsync_directory(directory)
    return notes


def _swap_bases(names: list[str]) -> list[int]:
    bases = []
    for name in names:
        stem, dot, suffix = name.partition(".")
        if dot and suffix == "log.swap" and len(stem) == OFFSET_DIGITS and stem.isdigit():
            bases.append(int(stem))
    return sorted(set(bases))


def _next_offset(path: str, base: int) -> int:
    """The offset after the last batch of a complete (fsynced) swap file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        end = base
        for _, header in read_headers(fd, path, 0, os.fstat(fd).st_size, zeros_end=True):
            end = header.next_offset
        return end
    finally:
        os.close(fd)
