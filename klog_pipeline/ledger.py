"""The ledger: per topic, which hours are loaded and from which offsets, so that a rerun is
a no-op and consecutive hours neither overlap nor leave a gap.

File: ``<warehouse>/_ledger/<topic>.json``, replaced atomically (temp, fsync, rename) and
written last when an hour is published, so it never claims an hour whose files are not in
place. Format (``format`` 1)::

    {"format": 1, "topic": "clicks", "schema": "user string, n bigint",
     "hours": {"2026-11-21T13": {"state": "loaded", "ranges": {"0": [1200, 1500], ...},
                                 "records": 1800, "rejects": 2, "value_bytes": 360000,
                                 "out_of_hour": 0, "loaded_at": "2026-11-21T14:05:09Z"}}}

``ranges`` are ``[start, end)`` per partition. ``state``: ``loaded``; ``incomplete`` (loaded
before the hour ended, on request: a later run loads it again); ``reloading`` (its files are
being replaced: not to be trusted until a run finishes it). Only ``loaded`` counts as done.

A lock file beside it (``flock``) keeps two loaders of one topic apart; the kernel drops the
lock when its holder dies, even by ``kill -9``.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from klog_pipeline.files import write_atomic
from klog_pipeline.hours import Hour

LOADED, INCOMPLETE, RELOADING = "loaded", "incomplete", "reloading"
FORMAT = 1


class LedgerError(Exception):
    """The ledger cannot be read or is held by another loader."""


@dataclass
class HourEntry:
    state: str
    ranges: dict[int, tuple[int, int]]
    records: int = 0
    rejects: int = 0
    value_bytes: int = 0
    out_of_hour: int = 0
    loaded_at: str = ""

    @property
    def done(self) -> bool:
        return self.state == LOADED

    def to_json(self) -> dict:
        data = asdict(self)
        data["ranges"] = {str(p): list(r) for p, r in sorted(self.ranges.items())}
        return data

    @classmethod
    def from_json(cls, data: dict) -> HourEntry:
        ranges = {int(p): (int(r[0]), int(r[1])) for p, r in data["ranges"].items()}
        return cls(**{**data, "ranges": ranges})


@dataclass
class Ledger:
    path: Path
    topic: str
    schema: str | None = None
    hours: dict[Hour, HourEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, topic: str) -> Ledger:
        """The ledger at ``path`` (an empty one if the file does not exist)."""
        try:
            data = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return cls(path, topic)
        except (OSError, orjson.JSONDecodeError) as exc:
            raise LedgerError(f"cannot read the ledger {path}: {exc}") from exc
        if data.get("format") != FORMAT or data.get("topic") != topic:
            raise LedgerError(f"{path} is not a format-{FORMAT} ledger of topic {topic!r}")
        hours = {Hour.parse(label): HourEntry.from_json(entry)
                 for label, entry in data.get("hours", {}).items()}
        return cls(path, topic, data.get("schema"), hours)

    def save(self) -> None:
        data = {"format": FORMAT, "topic": self.topic, "schema": self.schema,
                "hours": {h.label: e.to_json() for h, e in sorted(self.hours.items())}}
        write_atomic(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))

    def done(self, hour: Hour) -> bool:
        entry = self.hours.get(hour)
        return entry is not None and entry.done

    def pending(self) -> list[Hour]:
        """Hours with an entry that is not done (incomplete or interrupted reloads)."""
        return sorted(h for h, e in self.hours.items() if not e.done)


def contiguity_problems(ledger: Ledger, hour: Hour, ranges: dict[int, tuple[int, int]],
                        log_start: dict[int, int]) -> list[str]:
    """Where ``ranges`` for ``hour`` would not join the loaded hours beside it: the previous
    hour's end must be this hour's start, this hour's end the next hour's start, partition
    by partition. Empty when all is well (or no neighbour is loaded)."""
    problems = []
    before = ledger.hours.get(hour.previous())
    if before is not None and before.done:
        for p, (start, _) in sorted(ranges.items()):
            if p in before.ranges:
                problems += _joint(hour.previous(), before.ranges[p][1], hour, start, p,
                                   log_start.get(p, 0))
    after = ledger.hours.get(hour.next())
    if after is not None and after.done:
        for p, (_, end) in sorted(ranges.items()):
            if p in after.ranges:
                problems += _joint(hour, end, hour.next(), after.ranges[p][0], p, 0)
    return problems


def _joint(first: Hour, first_end: int, second: Hour, second_start: int, partition: int,
           log_start: int) -> list[str]:
    if first_end == second_start:
        return []
    where = (f"partition {partition}: hour {first} ends at offset {first_end} but hour "
             f"{second} starts at {second_start}")
    if second_start > first_end:
        why = (f" (retention deleted them: the log now starts at {log_start})"
               if log_start > first_end else "")
        return [f"gap: {where}; offsets {first_end}..{second_start - 1} would never be "
                f"loaded{why}"]
    return [f"overlap: {where}; offsets {second_start}..{first_end - 1} would be loaded twice"]


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold the topic's loader lock; LedgerError at once if another process holds it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LedgerError(f"another loader holds {lock_path}") from None
        yield
    finally:
        os.close(fd)
