"""Who may connect to a worker and for how long: Kafka's connection quotas and idle timeout.

A worker is a Kafka node, so Kafka's per-broker keys apply per worker:

- `max.connections`: over this many open connections, a new one is closed as soon as it is
  accepted (Kafka stops accepting instead; closing at once frees the backlog just as well and
  lets the refusal be counted);
- `max.connections.per.ip`: the same bound per client address, so one noisy host cannot take
  every slot from the others;
- `connections.max.idle.ms`: a connection with nothing in flight that has received no byte for
  this long is closed, including one holding half a request (a client that sent two bytes of a
  header and went quiet). A long-polling Fetch is in flight, so it is never idle.

The decisions are plain functions of counts and times; `ConnectionGuard` keeps the counts and
the statistics the metrics publish (opened, closed, refused, idle-closed).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


def admits(open_total: int, open_from_host: int, *, max_connections: int,
           max_connections_per_ip: int) -> bool:
    """Whether one more connection from a host with `open_from_host` open ones is allowed."""
    return open_total < max_connections and open_from_host < max_connections_per_ip


def is_idle(*, in_flight: int, last_received_s: float, now_s: float, max_idle_s: float) -> bool:
    """Kafka's idle rule: nothing owed to the client and no byte received for `max_idle_s`."""
    return in_flight == 0 and now_s - last_received_s >= max_idle_s


def sweep_interval_s(max_idle_ms: int) -> float:
    """How often to look for idle connections: a tenth of the timeout, within [10 ms, 1 s]."""
    return min(1.0, max(0.01, max_idle_ms / 10_000))


@dataclass
class ConnectionStatistics:
    """Counters of one worker's connections since it started (published as metrics)."""

    opened: int = 0
    closed: int = 0
    refused: int = 0
    idle_closed: int = 0

    @property
    def open(self) -> int:
        return self.opened - self.closed


class ConnectionGuard:
    """Admission and counting for one worker's connections (one event loop: no locks)."""

    def __init__(self, *, max_connections: int, max_connections_per_ip: int):
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self._by_host: Counter[str] = Counter()
        self.stats = ConnectionStatistics()

    def admit(self, host: str) -> bool:
        """Count a new connection from `host` in, or count it refused and return False."""
        if not admits(self.stats.open, self._by_host[host],
                      max_connections=self.max_connections,
                      max_connections_per_ip=self.max_connections_per_ip):
            self.stats.refused += 1
            return False
        self.stats.opened += 1
        self._by_host[host] += 1
        return True

    def release(self, host: str) -> None:
        """An admitted connection closed (whoever closed it)."""
        self.stats.closed += 1
        self._by_host[host] -= 1
        if self._by_host[host] <= 0:
            del self._by_host[host]
