"""`klog load-hourly --isolation-level read_committed`: a producer's aborted transaction never
reaches the warehouse (its records and the transaction markers take offsets the load skips),
and an hour an open transaction may still add to is not complete until it ends.

The hour is the current one (the loader's "now" is injected past its end): transaction
markers carry the broker's clock, so records stamped in a synthetic past hour would have their
hour's end found at the first marker."""

from __future__ import annotations

import time

import orjson
import pytest

import klog
from klog_pipeline.hours import HOUR_MS, Hour
from tests.pipeline.tables import ledger, rows_by_hour

pytestmark = pytest.mark.slow

TIMEOUT = 20
MARGIN_MS = 30_000  # the whole test inside one hour


def current_hour() -> Hour:
    now = int(time.time() * 1000)
    if now % HOUR_MS > HOUR_MS - MARGIN_MS:
        time.sleep((HOUR_MS - now % HOUR_MS) / 1000 + 0.1)
    return Hour.containing(int(time.time() * 1000))


def _send(producer, topic: str, ids: range) -> list[dict]:
    events = []
    for event_id in ids:
        event = {"id": event_id, "user": f"u{event_id % 97}", "page": f"/p/{event_id % 13}",
                 "ms": event_id % 500, "ok": event_id % 5 != 0, "ts": int(time.time() * 1000)}
        producer.send(topic, orjson.dumps(event), partition=event_id % 2)
        events.append(event)
    return events


def _ids(events) -> list[int]:
    return sorted(e["id"] for e in events)


def test_aborted_and_open_transactions_never_reach_the_warehouse(spark, broker, topic_factory,
                                                                 load_hourly, tmp_path):
    topic, warehouse = topic_factory(2), tmp_path / "warehouse"
    hour = current_hour()
    with klog.Producer(bootstrap_servers=broker.bootstrap, transactional_id=f"{topic}-txn",
                       linger_ms=0) as producer:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        kept = _send(producer, topic, range(0, 40))
        producer.commit_transaction(TIMEOUT)
        producer.begin_transaction()
        _send(producer, topic, range(1000, 1030))
        producer.flush(TIMEOUT)
        producer.abort_transaction(TIMEOUT)
        producer.begin_transaction()
        kept += _send(producer, topic, range(40, 60))
        producer.commit_transaction(TIMEOUT)

        status, out = load_hourly(topic, warehouse, "--hour", hour.label,
                                  "--isolation-level", "read_committed", now=hour)
        assert status == 0, out
        events = rows_by_hour(spark, warehouse / topic)[hour]
        assert _ids(events) == _ids(kept)
        entry = ledger(warehouse, topic)["hours"][hour.label]
        assert entry["records"] == 60
        assert sum(end - start for start, end in entry["ranges"].values()) == 60 + 30 + 6

        # an open transaction: the hour is not complete until it ends
        producer.begin_transaction()
        _send(producer, topic, range(2000, 2004))
        producer.flush(TIMEOUT)
        status, out = load_hourly(topic, warehouse, "--hour", hour.label, "--reload",
                                  "--isolation-level", "read_committed", now=hour)
        assert status == 1 and "open transaction" in out, out
        producer.abort_transaction(TIMEOUT)
    status, out = load_hourly(topic, warehouse, "--hour", hour.label, "--reload",
                              "--isolation-level", "read_committed", now=hour)
    assert status == 0, out
    assert _ids(rows_by_hour(spark, warehouse / topic)[hour]) == _ids(kept)
