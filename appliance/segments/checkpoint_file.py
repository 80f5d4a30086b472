"""Kafka's checkpoint file format: the one reader and writer of it.

Kafka keeps small per-log-dir and per-partition tables in text files its tools read
(``CheckpointFile``): line 1 the format version, line 2 the number of entries, then one entry
per line, its fields separated by spaces::

    0
    2
    orders 0 1200
    orders 1 7

klog writes two of them, each with its own fields: a partition's ``leader-epoch-checkpoint``
(``leader_epochs.py``) and a log dir's ``replication-offset-checkpoint`` (the workers' high
watermarks). This module knows only the frame; what the fields mean, and whether a damaged
file is rebuilt or read as empty, is up to each caller. Blank lines are skipped. Writes
replace the file atomically and durably (``layout.replace_durably``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from .layout import replace_durably


def read_entries(path, *, fields: int, version: int = 0) -> list[list[str]]:
    """The entries of the checkpoint at ``path``, each a list of ``fields`` strings.

    Raises FileNotFoundError when the file is missing (other OSErrors as ``open`` does), and
    ValueError naming the path and what is wrong when the file is not UTF-8 text, its first
    line is not ``version``, its second not a count matching the entries, or an entry does
    not have ``fields`` fields."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != [str(version)]:
        found = " ".join(lines[0]) if lines else "an empty file"
        raise ValueError(f"{path}: expected version {version} on line 1, found {found!r}")
    if len(lines) < 2 or len(lines[1]) != 1 or not lines[1][0].isdecimal():
        found = " ".join(lines[1]) if len(lines) > 1 else "nothing"
        raise ValueError(f"{path}: expected a count of entries on line 2, found {found!r}")
    count, entries = int(lines[1][0]), lines[2:]
    if count != len(entries):
        raise ValueError(f"{path}: {count} entries announced, {len(entries)} found")
    for number, entry in enumerate(entries, start=1):
        if len(entry) != fields:
            raise ValueError(f"{path}: entry {number} has {len(entry)} fields, "
                             f"not {fields}: {' '.join(entry)!r}")
    return entries


def write_entries(path, entries: Iterable[Sequence[object]], *, version: int = 0) -> None:
    """Replace the checkpoint at ``path`` with ``entries`` (each field written with ``str``;
    a field must hold no whitespace), so that a crash leaves the old file or the new one
    whole. Raises OSError (e.g. ENOSPC)."""
    lines = [" ".join(str(field) for field in entry) + "\n" for entry in entries]
    replace_durably(os.fspath(path), f"{version}\n{len(lines)}\n" + "".join(lines))
