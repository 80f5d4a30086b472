"""Reopening a partition after a kill -9 of its worker: attach vs recovery vs a cold rescan.

A forked child fills a partition with 16 KiB batches (increasing timestamps), publishes
``log.snapshot()`` after its last append (as the worker publishes into the shm region), then
dies by SIGKILL in the middle of one more append (``segment.torn_write``: a torn tail). The page
cache still holds everything, as when only the worker died. Then, side by side, the time of:

- ``attach``: ``PartitionLog.open(..., attach=<published numbers>)``: sealed segments and the
  active segment up to the published bytes are trusted; only the torn tail is validated;
- ``recover``: the normal open after an unclean shutdown: every segment's indexes loaded and
  checked entry by entry, every segment's tail validated from its last good index entry, every
  segment fdatasync'd;
- ``full``: ``verify="full"``: every batch CRC'd and every index rebuilt (a cold rescan; the
  page cache is warm, so this is CPU, not disk).

Two situations: **warm** (``os.sync()`` before each open, the torn tail restored each time, so
only the recovery work is timed; best and median of ``--rounds``) and **right after the kill**
(a fresh fill each, the writer's dirty pages not yet written back: the normal recovery's
fdatasync then writes them out, attach defers that to the log's first flush).

Figures only, no assertions. Run: ``.venv/bin/python perf/bench_attach.py [--quick]``. Files go
to a temporary directory under ``--dir`` (default: ``var/`` in the repo), removed afterwards.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from appliance.segments import AttachPoint, LogConfig, PartitionLog, faults  # noqa: E402
from tests.segments.batches import make_batch  # noqa: E402

MIB = 1 << 20
BATCH_BYTES = 16 * 1024
VARIANTS = ("attach", "recover", "full")


def _batch(i: int, payload: bytes) -> bytes:
    return make_batch(records=16, payload=payload, base_timestamp=1_700_000_000_000 + i)


def fill_and_kill(directory: str, config: LogConfig, total_bytes: int) -> AttachPoint:
    """A child fills the log, publishes its numbers on a pipe, and is SIGKILLed mid-append."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker about to die; never returns
        try:
            os.close(read_fd)
            log = PartitionLog.open(directory, config, now_ms=0)
            payload = random.Random(1).randbytes(BATCH_BYTES - 61)
            for i in range(total_bytes // BATCH_BYTES - 1):  # the torn one fits: no roll
                log.append(_batch(i, payload), now_ms=0)
            os.write(write_fd, " ".join(map(str, log.snapshot().attach_point())).encode())
            faults.arm("segment.torn_write", faults.kill_self)
            log.append(_batch(-1, payload), now_ms=0)
        finally:
            os._exit(1)
    os.close(write_fd)
    numbers = os.read(read_fd, 200).decode()
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise SystemExit(f"the writer did not die by SIGKILL (status {status}): {numbers!r}")
    return AttachPoint(*map(int, numbers.split()))


def crash(log: PartitionLog) -> None:
    """Release the files as a SIGKILL would: nothing trimmed, the state file says unclean."""
    for segment in log.segments.all_including_retired():
        segment.active = False
        segment.close()
    log._closed = True


def open_timed(directory: str, config: LogConfig, variant: str, point: AttachPoint):
    start = time.perf_counter()
    log = PartitionLog.open(directory, config, now_ms=0,
                            attach=point if variant == "attach" else None,
                            verify="full" if variant == "full" else "tail")
    elapsed = time.perf_counter() - start
    report = log.recovery
    if (variant == "attach") != report.attached or report.attach_refused:
        raise SystemExit(f"unexpected recovery for {variant}:\n{report}")
    if log.log_end_offset != point.log_end_offset:
        raise SystemExit(f"{variant}: log end {log.log_end_offset}, "
                         f"expected {point.log_end_offset}")
    return elapsed, log


def torn_tail(directory: str, point: AttachPoint) -> tuple[str, bytes]:
    path = os.path.join(directory, f"{point.active_base_offset:020d}.log")
    with open(path, "rb") as f:
        f.seek(point.active_bytes)
        return path, f.read(2 * BATCH_BYTES).rstrip(b"\0")


def restore(path: str, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def bench_warm(root: str, config: LogConfig, total_bytes: int, rounds: int) -> None:
    directory = os.path.join(root, "warm")
    point = fill_and_kill(directory, config, total_bytes)
    path, tail = torn_tail(directory, point)
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    reports = {}
    for _ in range(rounds):
        for variant in VARIANTS:
            restore(path, point.active_bytes, tail)
            os.sync()
            elapsed, log = open_timed(directory, config, variant, point)
            reports[variant] = log.recovery
            crash(log)
            times[variant].append(elapsed)
    segments = len(reports["attach"].segments)
    print(f"\n  warm page cache, nothing dirty; {total_bytes // MIB} MiB in {segments} segments "
          f"of {config.segment_bytes // MIB} MiB, {len(tail)} torn bytes; best / median of "
          f"{rounds} (ms)")
    base = min(times["attach"])
    for variant in VARIANTS:
        best, median = min(times[variant]), statistics.median(times[variant])
        r = reports[variant]
        detail = (f"trusted {r.trusted_bytes // MIB} MiB" if r.attached else
                  f"{sum(s.batches_validated for s in r.segments)} batches validated")
        print(f"  {variant:>8}  {best * 1000:9.1f}  {median * 1000:9.1f}  "
              f"x{best / base:7.1f}   {detail}, {r.bytes_truncated} bytes cut")
    shutil.rmtree(directory)


def bench_after_kill(root: str, config: LogConfig, total_bytes: int) -> None:
    print("\n  right after the kill: the writer's dirty pages not yet written back; one fill "
          "each (ms)")
    for variant in ("attach", "recover"):
        directory = os.path.join(root, f"dirty-{variant}")
        os.sync()
        point = fill_and_kill(directory, config, total_bytes)
        elapsed, log = open_timed(directory, config, variant, point)
        start = time.perf_counter()
        log.flush()
        flushed = time.perf_counter() - start
        crash(log)
        what = ("its first flush then syncs what the dead writer left dirty" if variant ==
                "attach" else "the open synced it; the first flush")
        print(f"  {variant:>8}  {elapsed * 1000:9.1f}   ({what}: {flushed * 1000:.1f} ms)")
        shutil.rmtree(directory)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 MiB instead of 1 GiB")
    parser.add_argument("--rounds", type=int, default=None, help="warm rounds (default 5; 2)")
    parser.add_argument("--dir", default=str(REPO / "var"), help="where the files go")
    args = parser.parse_args(argv)
    logging.getLogger("klog.segments").setLevel(logging.ERROR)  # each open reports its cut
    total = (128 if args.quick else 1024) * MIB
    rounds = args.rounds or (2 if args.quick else 5)
    os.makedirs(args.dir, exist_ok=True)
    root = tempfile.mkdtemp(prefix="klog-bench-attach-", dir=args.dir)
    print(f"reopening a {total // MIB} MiB partition of {BATCH_BYTES // 1024} KiB batches after "
          f"a kill -9 mid-append")
    try:
        for segment_bytes in (total, total // 8):
            config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1)
            bench_warm(root, config, total, rounds)
        bench_after_kill(root, LogConfig(segment_bytes=total, retention_ms=-1), total)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
