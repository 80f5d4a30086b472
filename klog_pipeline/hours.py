"""Hours as values: parsing ``2026-11-21T13``, their bounds in epoch ms, and which are complete.

All hours are UTC hours. An hour is the half-open interval [start_ms, end_ms); the loader maps
it to the warehouse partition ``dt=2026-11-21/hour=13``. Pure: no clock here; ``now_ms`` is
always passed in, so the loader's notion of "now" can be injected (tests, replays).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

HOUR_MS = 3_600_000

_HOUR = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{1,2})(?::00(?::00)?)?Z?$")


@dataclass(frozen=True, order=True)
class Hour:
    """One UTC hour, ``index`` hours after the epoch."""

    index: int

    @classmethod
    def parse(cls, text: str) -> Hour:
        """``2026-11-21T13`` (also ``2026-11-21T13:00``, ``2026-11-21 13``); ValueError else."""
        match = _HOUR.match(text.strip())
        if match is None:
            raise ValueError(f"not an hour: {text!r} (expected YYYY-MM-DDTHH, e.g. 2026-11-21T13)")
        year, month, day, hour = map(int, match.groups())
        moment = datetime(year, month, day, hour, tzinfo=UTC)
        return cls(int(moment.timestamp()) // 3600)

    @classmethod
    def containing(cls, ms: int) -> Hour:
        return cls(ms // HOUR_MS)

    @property
    def start_ms(self) -> int:
        return self.index * HOUR_MS

    @property
    def end_ms(self) -> int:
        return (self.index + 1) * HOUR_MS

    @property
    def label(self) -> str:
        return self._moment().strftime("%Y-%m-%dT%H")

    @property
    def dt(self) -> str:
        return self._moment().strftime("%Y-%m-%d")

    @property
    def hh(self) -> str:
        return self._moment().strftime("%H")

    def next(self) -> Hour:
        return Hour(self.index + 1)

    def previous(self) -> Hour:
        return Hour(self.index - 1)

    def is_complete(self, now_ms: int, settle_ms: int) -> bool:
        """True once the hour has ended and ``settle_ms`` more have passed (flush delays,
        producers' clocks): only then are its records final in the log."""
        return now_ms >= self.end_ms + settle_ms

    def _moment(self) -> datetime:
        return datetime.fromtimestamp(self.index * 3600, tz=UTC)

    def __str__(self) -> str:
        return self.label


def last_complete(now_ms: int, settle_ms: int) -> Hour:
    """The latest hour that is complete at ``now_ms``."""
    return Hour((now_ms - settle_ms) // HOUR_MS - 1)


def hours_between(first: Hour, last: Hour) -> list[Hour]:
    """``first`` .. ``last`` inclusive, oldest first (empty when last < first)."""
    return [Hour(i) for i in range(first.index, last.index + 1)]


def parse_moment_ms(text: str) -> int:
    """Epoch ms from an integer (ms) or an ISO-8601 time (UTC unless it carries an offset)."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a time: {text!r} (epoch ms or ISO-8601)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
