"""Synthetic click events for the pipeline tests: known counts per hour, spread over every
partition, some arriving late within their hour. Deterministic (no randomness)."""

from __future__ import annotations

import hashlib

import orjson

import klog
from klog_pipeline.hours import HOUR_MS, Hour

LATE_EVERY = 7  # every 7th event is stamped up to 20 minutes earlier than its neighbours


def click(event_id: int, hour: Hour, index: int, count: int) -> tuple[int, bytes]:
    """(timestamp_ms, JSON value) of the ``index``-th of ``count`` events of ``hour``."""
    ts = hour.start_ms + index * (HOUR_MS // count)
    if index % LATE_EVERY == 3:
        ts = max(hour.start_ms, ts - 20 * 60_000)  # late, but within its hour
    event = {"id": event_id, "user": f"u{event_id % 97}", "page": f"/p/{event_id % 13}",
             "ms": event_id % 500, "ok": event_id % 5 != 0, "ts": ts}
    return ts, orjson.dumps(event)


def produce_hours(bootstrap: str, topic: str, counts: dict[Hour, int], *, partitions: int = 6,
                  first_id: int = 0) -> dict[Hour, list[dict]]:
    """Produce ``counts[hour]`` click events per hour, hours in order, partition chosen
    round-robin; returns the events per hour (as dicts)."""
    produced: dict[Hour, list[dict]] = {}
    event_id = first_id
    with klog.Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for hour in sorted(counts):
            events = produced.setdefault(hour, [])
            for index in range(counts[hour]):
                ts, value = click(event_id, hour, index, counts[hour])
                producer.send(topic, value, key=b"u%d" % (event_id % 97),
                              partition=event_id % partitions, timestamp_ms=ts)
                events.append(orjson.loads(value))
                event_id += 1
            producer.flush(30)
    return produced


def checksum(events) -> str:
    """Order-independent digest of events (dicts with the click fields)."""
    lines = sorted(orjson.dumps({k: e[k] for k in ("id", "user", "page", "ms", "ok", "ts")},
                                option=orjson.OPT_SORT_KEYS) for e in events)
    return hashlib.sha256(b"\n".join(lines)).hexdigest()
