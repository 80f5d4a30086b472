"""Kafka's ``cleaner-offset-checkpoint``: where the cleaner stopped in each compacted log.

One file at the top of a log dir, in Kafka's checkpoint format (``checkpoint_file.py``:
``topic partition offset`` lines): the first dirty offset of each partition the cleaner has
run on. One worker owns each log dir, so it is the only writer. A missing or damaged file
reads as empty: the cleaner then starts from each log's start, which costs a run, not data
(cleaning is idempotent).
"""

from __future__ import annotations

import logging
import os

from .checkpoint_file import read_entries, write_entries

log = logging.getLogger("klog.cleaner")

FILE = "cleaner-offset-checkpoint"


def read(log_dir) -> dict[tuple[str, int], int]:
    path = os.path.join(log_dir, FILE)
    try:
        return {(topic, int(partition)): int(offset)
                for topic, partition, offset in read_entries(path, fields=3)}
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        log.warning("%s is unreadable (%s): every compacted log is cleaned from its start",
                    path, exc)
        return {}


def write(log_dir, entries: dict[tuple[str, int], int]) -> None:
    """Replace the file durably. Raises OSError."""
    write_entries(os.path.join(log_dir, FILE),
                  ((topic, partition, offset)
                   for (topic, partition), offset in sorted(entries.items())))
