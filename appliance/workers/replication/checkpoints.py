"""The high watermarks of a log dir's replicated partitions, kept across restarts.

Kafka's `replication-offset-checkpoint` at the top of the log dir, in Kafka's checkpoint format
(`appliance/segments/checkpoint_file.py`: a version line `0`, a count line, then
`topic partition offset` per line). Why keep it: a log
reopened after a crash ends at its log end, which may hold records the fleet never
committed (a follower's copy of a leader's tail, a leader's unreplicated appends). Without
the checkpoint the replica would either show consumers those records, which a truncation
may take back, or know nothing committed at all until its peers speak. With it, a replica
starts from the last high watermark it knew, which only ever lags the truth.

One worker owns each log dir, so it is the only writer; writes replace the file atomically.
A missing or unreadable file reads as empty (the replica then waits for its peers).
"""

from __future__ import annotations

import logging
from pathlib import Path

from appliance.segments.checkpoint_file import read_entries, write_entries

log = logging.getLogger(__name__)

FILE = "replication-offset-checkpoint"


def read(log_dir: Path) -> dict[tuple[str, int], int]:
    """``{(topic, partition): high watermark}``; empty when the file is missing, and with a
    warning when it is unreadable."""
    path = Path(log_dir) / FILE
    try:
        return {(topic, int(partition)): int(offset)
                for topic, partition, offset in read_entries(path, fields=3)}
    except FileNotFoundError:
        return {}
    except (ValueError, OSError) as exc:
        log.warning("%s is unreadable (%s): replicas start without high watermarks", path, exc)
        return {}


def write(log_dir: Path, entries: dict[tuple[str, int], int]) -> None:
    """Replace the checkpoint durably. Raises OSError."""
    write_entries(Path(log_dir) / FILE, ((topic, partition, offset)
                                         for (topic, partition), offset in sorted(entries.items())))
