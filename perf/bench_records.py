"""Records per second of klog's record batch encoder and decoder, next to kafka-python's.

Every run measures klog (``build_batch``, ``BatchBuilder.append``, ``decode_batches``,
``decode_into_columns``) with
the codec ``klog.protocol.records_codec`` selected (the compiled one unless it is not built or
``KLOG_PURE_PYTHON=1``) and with the pure-Python reference forced, and, on the same records in
the same process, the baseline: kafka-python 3's pure-Python
``DefaultRecordBatchBuilder`` and ``MemoryRecords``; aiokafka's Cython builder and reader are
shown too, as the ceiling a C extension reaches. Records: 200-byte values, 16-byte keys on
half of them, no headers; batches of 50 and 1000 records, uncompressed and lz4 (every codec
with ``--all``). Figures: best of several rounds, millions of records per second, one core.
No assertions: figures only.

Run: ``.venv/bin/python perf/bench_records.py [--quick] [--all]``
"""

from __future__ import annotations

import argparse
import random
import time
from contextlib import contextmanager

from klog.protocol import records as records_api
from klog.protocol import records_codec, records_columns, records_decode, records_encode
from klog.protocol.records import BatchBuilder, build_batch, decode_batches
from klog.protocol.records_columns import RecordColumns, decode_into_columns

try:
    import kafka.codec
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
    from kafka.record.memory_records import MemoryRecords as KpRecords
except ImportError:  # a baseline is optional; klog's figures still print
    KpBuilder = None
try:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
    from aiokafka.record.memory_records import MemoryRecords as AioRecords
except ImportError:
    AioBuilder = None

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TS = 1_750_000_000_000


def make_records(count: int, seed: int) -> list[tuple]:
    rnd = random.Random(seed)
    words = [rnd.randbytes(8).hex().encode() for _ in range(64)]  # compressible, not trivially
    records = []
    for i in range(count):
        value = b" ".join(rnd.choice(words) for _ in range(12))[:200].ljust(200, b".")
        key = b"user-%011d" % rnd.randrange(10**9) if i % 2 else None
        records.append((BASE_TS + i // 20, key, value, None))
    return records


def best_rate(fn, records_per_call: int, budget_s: float) -> float:
    """Millions of records/s: the best of 5 rounds, each sized to ~budget/5 seconds."""
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > budget_s / 5 or calls > 1 << 20:
            break
        calls *= 2
    best = elapsed / calls
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return records_per_call / best / 1e6


@contextmanager
def pure_codec():
    """klog.protocol.records with the pure-Python codec, whatever the selector chose."""
    chosen = {name: getattr(records_api, name)
              for name in ("encode_all", "encode_one", "decode_records")}
    records_api.encode_all = records_encode.encode_all
    records_api.encode_one = records_encode.encode_one
    records_api.decode_records = records_decode.decode_records
    records_columns.compiled_columns = None
    try:
        yield
    finally:
        for name, function in chosen.items():
            setattr(records_api, name, function)
        records_columns.compiled_columns = records_codec.compiled_columns


def klog_rows(records, codec, count, budget, label):
    data = build_batch(records, codec=codec)
    return [
        (
            f"klog build_batch {label}",
            best_rate(lambda r=records, c=codec: build_batch(r, codec=c), count, budget),
            best_rate(lambda d=data: klog_decode(d), count, budget),
        ),
        (
            f"klog BatchBuilder {label}",
            best_rate(lambda r=records, c=codec: klog_append(r, c), count, budget),
            None,
        ),
        (
            f"klog into columns {label}",
            None,
            best_rate(lambda d=data: decode_into_columns(d, RecordColumns()), count, budget),
        ),
    ]


def klog_append(records, codec):
    builder = BatchBuilder(batch_size=1 << 30, codec=codec)
    append = builder.append
    for ts, key, value, headers in records:
        append(ts, key, value, headers)
    return builder.build()


def klog_decode(data):
    n = 0
    for _, records in decode_batches(data):
        n += len(records)
    return n


def peer_build(builder_class, records, codec):
    builder = builder_class(2, codec, False, -1, -1, -1, 1 << 30)
    for offset, (ts, key, value, headers) in enumerate(records):
        builder.append(offset, ts, key, value, headers or [])
    return bytes(builder.build())


def peer_decode(records_class, data):
    n = 0
    batches = records_class(data)
    while (batch := batches.next_batch()) is not None:
        for _ in batch:
            n += 1
    return n


def peers(codec: int):
    """(name, builder class, reader class) of each baseline installed with this codec."""
    out = []
    kp_has = {0: True, 1: True}.get(codec) or (
        KpBuilder is not None
        and {2: kafka.codec.has_snappy, 3: kafka.codec.has_lz4, 4: kafka.codec.has_zstd}[codec]()
    )
    if KpBuilder is not None and kp_has:
        out.append(("kafka-python", KpBuilder, KpRecords))
    if AioBuilder is not None:
        out.append(("aiokafka(C)", AioBuilder, AioRecords))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short rounds (for make perf)")
    parser.add_argument("--all", action="store_true", help="every codec, not only none and lz4")
    args = parser.parse_args()
    budget = 0.2 if args.quick else 1.0
    print("M records/s, one core; encode = whole batch built, decode = every record read")
    chosen = records_codec.IMPLEMENTATION
    print(f"klog's selected codec: {chosen} {records_codec.FALLBACK_REASON}")
    print(f"{'batch':>5} {'codec':>6}  {'who':<26} {'encode':>7} {'decode':>7}")
    for count in (50, 1000):
        records = make_records(count, seed=count)
        for name in list(CODECS) if args.all else ["none", "lz4"]:
            codec = CODECS[name]
            rows = klog_rows(records, codec, count, budget, f"({chosen})")
            if chosen != "python":
                with pure_codec():
                    rows += klog_rows(records, codec, count, budget, "(python)")
            for who, builder_class, records_class in peers(codec):
                theirs = peer_build(builder_class, records, codec)
                encode = best_rate(
                    lambda b=builder_class, r=records, c=codec: peer_build(b, r, c), count, budget
                )
                decode = best_rate(
                    lambda rc=records_class, d=theirs: peer_decode(rc, d), count, budget
                )
                rows.append((who, encode, decode))
            for who, encode, decode in rows:
                enc = f"{encode:7.2f}" if encode is not None else f"{'':>7}"
                dec = f"{decode:7.2f}" if decode is not None else f"{'':>7}"
                print(f"{count:>5} {name:>6}  {who:<26} {enc} {dec}")


if __name__ == "__main__":
    main()
