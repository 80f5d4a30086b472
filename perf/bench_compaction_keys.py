"""The log cleaner's key comparison: cleaner MB/s against a raw read-and-write of the same
bytes, in the same run, for each way of holding the offset map.

For each log (N updates over K keys in sealed 8 MiB segments, written once per run):

- ``raw copy``: read each segment in io-buffer chunks, write them to a new file, fsync: the
  ceiling for a cleaner that reads its input twice (map, then rewrite) as Kafka's does;
- ``compiled``: ``cleaner.clean`` as the worker runs it (the compiled passes over the
  offset map the codec builds: an offset table since branch ``keys``, a dict of digests
  before);
- ``pure``: the same with the pure-Python reference (a dict keyed by the key bytes).

Each cleaning runs in a child process on a copy of the log; its RSS is sampled every 5 ms
while it cleans (``/proc/self/statm``), and the peak less the RSS before is the cleaning's.
Two batch sizes: 20 records (every batch's own Python work weighs most) and 500 (closer to
what a busy librdkafka producer sends; the per-record work weighs most).

``--repo PATH`` imports klog from another checkout (e.g. /work/main, for a before/after of
the compiled codec). Figures only, no assertions.
Run: ``.venv/bin/python perf/bench_compaction_keys.py [--quick] [--repo PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MB = 1e6


def _setup_path(repo: str) -> None:
    sys.path.insert(0, repo)


def _config():
    from appliance.segments import LogConfig
    return LogConfig(segment_bytes=8 << 20, segment_index_bytes=1 << 20, retention_ms=-1,
                     cleanup_policy="compact", file_delete_delay_ms=0)


def write_log(directory: str, updates: int, keys: int, per_batch: int) -> None:
    from appliance.segments import PartitionLog
    from tests.compaction.logs import write_updates
    plog = PartitionLog.open(directory, _config(), now_ms=0)
    write_updates(plog, updates, keys, per_batch=per_batch)
    plog.roll(now_ms=1)
    plog.close()


def clean_once(directory: str, path: str) -> dict:
    """Clean the log at ``directory`` in this process; time, sizes, RSS."""
    from appliance.segments import PartitionLog, cleaner
    from appliance.segments.cleaner import CleanerSettings
    from appliance.segments.offset_map import OffsetMap
    if path == "pure":
        cleaner.OffsetMap = lambda size, **kw: OffsetMap(size, digests=False, **kw)
    plog = PartitionLog.open(directory, _config(), now_ms=2)
    size = plog.size_bytes
    rss_before = _rss()
    peak, done = [rss_before], threading.Event()

    def sample():
        while not done.wait(0.005):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.perf_counter()
    cleaner.clean(plog, checkpoint=None, now_ms=10_000, settings=CleanerSettings())
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    cleaned = plog.size_bytes
    plog.close()
    return {"size": size, "seconds": elapsed, "cleaned": cleaned,
            "rss": max(peak[0], _rss()) - rss_before}


def _rss() -> int:
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def raw_copy(directory: str, target: str, chunk: int = 512 * 1024) -> tuple[int, float]:
    paths = sorted(str(p) for p in Path(directory).glob("*.log") if p.stat().st_size)
    start = time.perf_counter()
    total = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for path in paths:
            source = os.open(path, os.O_RDONLY)
            try:
                while data := os.read(source, chunk):
                    os.write(fd, data)
                    total += len(data)
            finally:
                os.close(source)
        os.fsync(fd)
    finally:
        os.close(fd)
    return total, time.perf_counter() - start


def _child(repo: str, directory: str, path: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--repo", repo, "--child", directory, path],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--dir", default=None)
    parser.add_argument("--child", nargs=2, metavar=("DIRECTORY", "PATH"))
    args = parser.parse_args()
    _setup_path(args.repo)
    if args.child:
        print(json.dumps(clean_once(*args.child)))
        return
    from klog.protocol.records_codec import IMPLEMENTATION
    updates = 100_000 if args.quick else 400_000
    base = args.dir or os.path.join(args.repo, "var")
    os.makedirs(base, exist_ok=True)
    root = tempfile.mkdtemp(dir=base, prefix="bench-compaction-keys-")
    print(f"klog from {args.repo} (codec: {IMPLEMENTATION})")
    try:
        for keys, per_batch in ((1000, 20), (updates // 2, 20), (1000, 500),
                                (updates // 2, 500)):
            master = os.path.join(root, f"log-{keys}")
            write_log(master, updates, keys, per_batch)
            total, raw_s = raw_copy(master, os.path.join(root, "raw"))
            print(f"{updates} updates over {keys} keys, {per_batch} a batch: "
                  f"{total / MB:.1f} MB of log")
            print(f"   raw copy  {raw_s:6.2f} s  {total / MB / raw_s:7.1f} MB/s "
                  "(read + write + fsync)")
            for path in ("compiled", "pure"):
                copy = os.path.join(root, f"{path}-{keys}")
                shutil.copytree(master, copy)
                r = _child(args.repo, copy, path)
                rate = r["size"] / MB / r["seconds"]
                print(f"   {path:9} {r['seconds']:6.2f} s  {rate:7.1f} MB/s "
                      f"({rate / (total / MB / raw_s):.2f}x raw), to {r['cleaned'] / MB:.2f} MB, "
                      f"peak RSS +{r['rss'] / 2**20:.1f} MiB")
                shutil.rmtree(copy, ignore_errors=True)
            shutil.rmtree(master, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
