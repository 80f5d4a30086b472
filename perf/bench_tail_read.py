"""A leader's read of the batch it appended last, beside a read through the index, same run.

An in-sync follower's fetch (and a consumer's at the tail) asks for exactly the batch just
appended: `LogSegment.tail_batch` answers it with one header read. The baseline is the batch
before it, which goes the usual way: a binary search of the offset index, then a scan of the
headers from the entry (up to `index.interval.bytes`, 4096 at Kafka's defaults, of batches).
One log at Kafka's defaults, one 200-byte record per batch (acks=all, one message at a time).

Run: .venv/bin/python perf/bench_tail_read.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.segments import LogConfig, PartitionLog  # noqa: E402
from tests.segments.batches import make_batch  # noqa: E402

BATCHES = 20_000
REPEAT = 20


def main() -> None:
    reads: dict[str, list[float]] = {"the batch appended last": [],
                                     "the batch before it (index and scan)": []}
    batch = make_batch(records=1, payload=b"x" * 200)
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(str(Path(tmp) / "bench-0"), LogConfig(), now_ms=0)
        try:
            for i in range(BATCHES):
                info = log.append(batch, now_ms=0)
                if i < 100 or i % 10:
                    continue
                for name, offset in zip(reads, (info.base_offset, info.base_offset - 1)):
                    start = time.perf_counter_ns()
                    for _ in range(REPEAT):
                        found = log.read_replica(offset, 1 << 20)
                    reads[name].append((time.perf_counter_ns() - start) / REPEAT / 1000)
                    assert found.first_offset == offset
        finally:
            log.close()
    for name, micros in reads.items():
        print(f"read_replica of {name}: median {statistics.median(micros):.1f} us "
              f"(p90 {statistics.quantiles(micros, n=10)[-1]:.1f} us, {len(micros)} points)")


if __name__ == "__main__":
    main()
