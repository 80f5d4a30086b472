"""A leader's reads for a follower catching up, each where the last one stopped, beside the
same reads through the offset index, same run.

A catching-up follower asks next for exactly the batch its last answer stopped before:
`LogSegment.batch_after_read` finds it with one header read. The baseline forgets that
position before each read, so the batch is found the usual way: a binary search of the offset
index, then a scan of headers from the entry. Two logs at Kafka's defaults (1 MiB fetches):
batches of about 1 MB (a producer with a large `batch.size`, the catch-up benchmark's), and
of 16 KiB (the producers' default `batch.size`). The two ways alternate, several rounds each.

Run: .venv/bin/python perf/bench_read_in_order.py
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

FETCH_BYTES = 1 << 20  # replica.fetch.max.bytes, Kafka's default
ROUNDS = 7
LOG_BYTES = 400_000_000


def read_all(log: PartitionLog, remembered: bool) -> tuple[float, int]:
    """Microseconds per read, and the reads, copying the whole log in order."""
    offset, reads, took = 0, 0, 0
    segment = log.segments.active
    while offset < log.log_end_offset:
        if not remembered:
            segment._read_end = None  # noqa: SLF001 - the baseline: found through the index
        start = time.perf_counter_ns()
        piece = log.read_replica(offset, FETCH_BYTES)
        took += time.perf_counter_ns() - start
        reads += 1
        end = piece.position + piece.length
        if end == segment.size:
            break
        offset, position = segment._read_end  # noqa: SLF001 - the batch the read stopped before
        assert position == end
    return took / reads / 1000, reads


def main() -> None:
    for label, records, payload in (("batches of about 1 MB", 1000, 1_000_000),
                                    ("batches of 16 KiB", 16, 16_384)):
        batch = make_batch(records=records, payload=b"x" * payload)
        with tempfile.TemporaryDirectory() as tmp:
            log = PartitionLog.open(str(Path(tmp) / "bench-0"), LogConfig(), now_ms=0)
            try:
                for _ in range(LOG_BYTES // len(batch)):
                    log.append(batch, now_ms=0)
                figures: dict[bool, list[float]] = {True: [], False: []}
                for _ in range(ROUNDS):
                    for remembered in (False, True):
                        micros, reads = read_all(log, remembered)
                        figures[remembered].append(micros)
            finally:
                log.close()
        base, hinted = statistics.median(figures[False]), statistics.median(figures[True])
        print(f"{label}, {reads} reads of up to 1 MiB in order: "
              f"where the last read stopped {hinted:.1f} us per read, "
              f"through the index {base:.1f} us (median of {ROUNDS} rounds each, alternating; "
              f"{base / hinted:.2f}x)")


if __name__ == "__main__":
    main()
