"""Pipeline benchmark (issue 7): one hour of JSON log events loaded into Parquet on a local
Spark (``local[2]``), beside Spark loading the same events from a JSON-lines file, same run.

- klog: ``HourlyLoader.load(hour)`` end to end, as ``klog load-hourly`` runs it: plan the
  hour (ListOffsets by time), one Spark task per partition reading with the ``klog``
  source's reader (klog client, Arrow batches), parse with orjson, write events + rejects
  Parquet, publish, ledger.
- also shown: the ``klog`` source alone (``count()`` of the hour); the source into Spark's
  own Parquet writer through a DataFrame (raw values, no parsing); and the DataFrame way to
  do the loader's work, ``mapInArrow`` parsing with the same code into Spark's Parquet writer
  (events only): the path the loader avoids, since every record crosses into the JVM, out to
  Python and back.
- baseline: ``spark.read.schema(...).json(file)`` of the same events (Spark's JVM JSON
  reader) written as Parquet with the same columns into a ``dt=/hour=`` directory.

Events: 200-byte JSON objects (5 million; 200 thousand with --quick), CreateTime stamps
spread over one past hour, 6 partitions on a two-worker appliance. Spark and its Python
workers are warmed up on a small hour first. Figures only, no assertions.

Run: .venv/bin/python perf/bench_pipeline.py [--quick] [--events N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import klog  # noqa: E402
from klog_pipeline.hours import HOUR_MS, Hour  # noqa: E402
from tests.conftest import Appliance  # noqa: E402

PARTITIONS = 6
BATCH = 1000
SCHEMA = "id bigint, user string, page string, ms bigint, ok boolean, ts bigint, ua string"
MB = 1_000_000


def event(i: int, ts: int) -> bytes:
    """One 200-byte JSON event."""
    head = (b'{"id":%d,"user":"u%d","page":"/p/%d","ms":%d,"ok":%s,"ts":%d,"ua":"'
            % (i, i % 9973, i % 131, i % 997, b"true" if i % 5 else b"false", ts))
    return head + b"x" * (200 - len(head) - 2) + b'"}'


def produce_hour(bootstrap: str, topic: str, hour: Hour, count: int, jsonl: Path) -> int:
    """``count`` events over ``hour`` into ``topic`` and into the JSON-lines file; returns
    the bytes of the values."""
    total = 0
    step = HOUR_MS // (count // BATCH)
    with klog.Producer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=1_000_000,
                       acks=1) as producer, open(jsonl, "wb") as out:
        for n, first in enumerate(range(0, count, BATCH)):
            ts = hour.start_ms + n * step
            values = [event(i, ts) for i in range(first, min(first + BATCH, count))]
            producer.send_batch(topic, values, partition=n % PARTITIONS, timestamp_ms=ts)
            out.write(b"\n".join(values) + b"\n")
            total += sum(map(len, values))
        producer.flush(600)
    return total


def load_klog(spark, bootstrap: str, topic: str, hour: Hour, warehouse: Path) -> float:
    from klog_pipeline.loader import HourlyLoader, LoadSettings

    settings = LoadSettings(bootstrap, topic, warehouse, schema=SCHEMA)
    start = time.perf_counter()
    with HourlyLoader(spark, settings, now_ms=hour.end_ms + 120_000) as loader:
        result = loader.load(hour)
    elapsed = time.perf_counter() - start
    assert result.status == "loaded", result
    return elapsed


def count_source(spark, bootstrap: str, topic: str, hour: Hour) -> tuple[float, int]:
    frame = (spark.read.format("klog").option("bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingTimestamp", str(hour.start_ms))
             .option("endingTimestamp", str(hour.end_ms)).load())
    start = time.perf_counter()
    rows = frame.count()
    return time.perf_counter() - start, rows


def source_to_parquet(spark, bootstrap: str, topic: str, hour: Hour, out: Path) -> float:
    frame = (spark.read.format("klog").option("bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingTimestamp", str(hour.start_ms))
             .option("endingTimestamp", str(hour.end_ms)).load())
    start = time.perf_counter()
    frame.select("value", "partition", "offset", "timestamp").write.parquet(str(out))
    return time.perf_counter() - start


def source_parse_to_parquet(spark, bootstrap: str, topic: str, hour: Hour, out: Path) -> float:
    from klog_pipeline.event_schema import EventSchema
    from klog_pipeline.events import parse_batch

    schema = EventSchema.parse(SCHEMA)

    def parse(batches):
        for batch in batches:
            yield parse_batch(batch, schema)[0]

    frame = (spark.read.format("klog").option("bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingTimestamp", str(hour.start_ms))
             .option("endingTimestamp", str(hour.end_ms)).load())
    ddl = schema.ddl + ", _key binary, _partition int, _offset bigint, _timestamp timestamp, " \
        "_extra string"
    start = time.perf_counter()
    (frame.select("key", "value", "partition", "offset", "timestamp").mapInArrow(parse, ddl)
     .write.parquet(str(out)))
    return time.perf_counter() - start


def load_json_file(spark, jsonl: Path, hour: Hour, warehouse: Path) -> float:
    out = warehouse / "baseline" / f"dt={hour.dt}" / f"hour={hour.hh}"
    start = time.perf_counter()
    spark.read.schema(SCHEMA).json(str(jsonl)).write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--events", type=int, help="events in the hour (default 5 million, "
                        "200 thousand with --quick)")
    args = parser.parse_args()
    count = args.events or (200_000 if args.quick else 5_000_000)
    hour = Hour(Hour.containing(int(time.time() * 1000)).index - 3)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        appliance = Appliance(tmp_path / "appliance", log_dirs=2,
                              settings={"log.segment.bytes": str(1 << 30)})
        appliance.start()
        try:
            with klog.Admin(appliance.bootstrap) as admin:
                for name in ("warmup", "events"):
                    admin.create_topic(name, PARTITIONS)
            start = time.perf_counter()
            produce_hour(appliance.bootstrap, "warmup", hour, 12_000, tmp_path / "warmup.jsonl")
            size = produce_hour(appliance.bootstrap, "events", hour, count,
                                tmp_path / "events.jsonl")
            produced_s = time.perf_counter() - start
            from klog_pipeline.session import open_session

            spark = open_session("local[2]", app_name="bench-pipeline")
            try:
                load_klog(spark, appliance.bootstrap, "warmup", hour, tmp_path / "warmup")
                load_json_file(spark, tmp_path / "warmup.jsonl", hour, tmp_path / "warmup")
                count_source(spark, appliance.bootstrap, "warmup", hour)
                klog_s = load_klog(spark, appliance.bootstrap, "events", hour,
                                   tmp_path / "warehouse")
                base_s = load_json_file(spark, tmp_path / "events.jsonl", hour,
                                        tmp_path / "warehouse")
                source_s, rows = count_source(spark, appliance.bootstrap, "events", hour)
                assert rows == count, rows
                frame_s = source_to_parquet(spark, appliance.bootstrap, "events", hour,
                                            tmp_path / "frame")
                parsed_s = source_parse_to_parquet(spark, appliance.bootstrap, "events", hour,
                                                   tmp_path / "parsed")
            finally:
                spark.stop()
        finally:
            appliance.stop()
    print(f"one hour: {count:,} events of 200 bytes ({size / MB:,.0f} MB), {PARTITIONS} "
          f"partitions, local[2]; produced in {produced_s:.1f} s")
    lines = [("klog load-hourly (source reader -> orjson -> Parquet, published)", klog_s),
             ("baseline: Spark JSON-lines file -> Parquet", base_s),
             ("klog source alone (count of the hour)", source_s),
             ("klog source -> DataFrame -> Spark Parquet writer (raw values)", frame_s),
             ("klog source -> mapInArrow(orjson) -> Spark Parquet writer", parsed_s)]
    for name, seconds in lines:
        print(f"  {name:<64} {seconds:7.1f} s {count / seconds:>11,.0f} rows/s "
              f"{size / MB / seconds:7.1f} MB/s")
    print(json.dumps({"events": count, "klog_s": round(klog_s, 2), "baseline_s": round(base_s, 2),
                      "source_count_s": round(source_s, 2), "frame_s": round(frame_s, 2),
                      "map_in_arrow_s": round(parsed_s, 2)}))


if __name__ == "__main__":
    main()
