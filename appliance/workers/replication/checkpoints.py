"""The high watermarks of a log dir's replicated partitions, kept across restarts.

Kafka's `replication-offset-checkpoint` at the top of the log dir, in Kafka's text format (a
version line `0`, a count line, then `topic partition offset` per line). Why keep it: a log
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

from appliance.segments.layout import replace_durably

log = logging.getLogger(__name__)

FILE = "replication-offset-checkpoint"
_VERSION = "0"


def read(log_dir: Path) -> dict[tuple[str, int], int]:
    path = Path(log_dir) / FILE
    try:
        lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
        if not lines or lines[0] != [_VERSION] or int(lines[1][0]) != len(lines) - 2:
            raise ValueError("not version 0 with a matching count")
        return {(topic, int(partition)): int(offset) for topic, partition, offset in lines[2:]}
    except FileNotFoundError:
        return {}
    except (ValueError, IndexError, OSError, UnicodeDecodeError) as exc:
        log.warning("%s is unreadable (%s): replicas start without high watermarks", path, exc)
        return {}


def write(log_dir: Path, entries: dict[tuple[str, int], int]) -> None:
    """Replace the checkpoint durably. Raises OSError."""
    lines = "".join(f"{topic} {partition} {offset}\n"
                    for (topic, partition), offset in sorted(entries.items()))
    replace_durably(str(Path(log_dir) / FILE), f"{_VERSION}\n{len(entries)}\n{lines}")
