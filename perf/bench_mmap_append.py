"""Which append path for segment files: slice writes into an mmap, or os.pwrite/os.write?

Every variant writes the same blocks into a fresh file preallocated with ``os.posix_fallocate``
(as the engine does), in the same run, so the figures are comparable side by side. Baseline:
``os.write`` of the same bytes to a plain (not preallocated) file. Each write is timed, so the
tail (p99.9, max) shows what a produce request would wait for. No assertions: figures only.

Run: ``.venv/bin/python perf/bench_mmap_append.py [--quick] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import tempfile
import time

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14
PREFAULT_CHUNK = 1 << 20  # how far ahead the prefaulting variants populate


def _fresh(path: str, size: int, *, preallocate: bool = True, sparse: bool = False) -> int:
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if preallocate:
        os.posix_fallocate(fd, 0, size)
    elif sparse:
        os.ftruncate(fd, size)
    return fd


_clock = time.perf_counter_ns


def _os_write_plain(path, blocks, size, lat):
    fd = _fresh(path, size, preallocate=False)
    for b in blocks:
        t = _clock()
        os.write(fd, b)
        lat.append(_clock() - t)
    return fd


def _os_write(path, blocks, size, lat):
    fd = _fresh(path, size)
    for b in blocks:
        t = _clock()
        os.write(fd, b)
        lat.append(_clock() - t)
    return fd


def _pwrite(path, blocks, size, lat):
    fd = _fresh(path, size)
    pos = 0
    for b in blocks:
        t = _clock()
        pos += os.pwrite(fd, b, pos)
        lat.append(_clock() - t)
    return fd


def _pwritev_patched(path, blocks, size, lat):
    """What a write-based engine does: a patched 8-byte base offset + the rest, one syscall."""
    fd = _fresh(path, size)
    pos = 0
    for i, b in enumerate(blocks):
        t = _clock()
        view = memoryview(b)
        pos += os.pwritev(fd, [i.to_bytes(8, "big"), view[8:]], pos)
        lat.append(_clock() - t)
    return fd


def _mmap_variant(flags=mmap.MAP_SHARED, advice=None, prefault=None, sparse=False):
    def run(path, blocks, size, lat):
        fd = _fresh(path, size, preallocate=not sparse, sparse=sparse)
        t = _clock()
        m = mmap.mmap(fd, size, flags=flags)
        if advice is not None:
            m.madvise(advice)
        lat.append(_clock() - t)  # the map's set-up counts as part of the first write
        pos, faulted = 0, 0
        for b in blocks:
            t = _clock()
            end = pos + len(b)
            if prefault is not None and end > faulted:
                faulted = prefault(m, faulted, size)
            m[pos:end] = b
            pos = end
            lat.append(_clock() - t)
        m.close()
        return fd

    return run


def _populate_write(m, start, size):
    length = min(PREFAULT_CHUNK, size - start)
    m.madvise(MADV_POPULATE_WRITE, start, length)
    return start + length


def _touch_pages(m, start, size):
    end = min(start + PREFAULT_CHUNK, size)
    for p in range(start, end, mmap.PAGESIZE):
        m[p] = 0  # a write fault per page, ahead of the copy
    return end


VARIANTS = {
    "os.write, plain file (baseline)": _os_write_plain,
    "os.write, fallocated": _os_write,
    "os.pwrite, fallocated": _pwrite,
    "os.pwritev, patched header": _pwritev_patched,
    "mmap slice, sparse (ftruncate) file": _mmap_variant(sparse=True),
    "mmap slice, fresh map": _mmap_variant(),
    "mmap + MADV_WILLNEED": _mmap_variant(advice=mmap.MADV_WILLNEED),
    "mmap + MADV_RANDOM (4 KiB faults)": _mmap_variant(advice=mmap.MADV_RANDOM),
    "mmap + MAP_POPULATE": _mmap_variant(flags=mmap.MAP_SHARED | mmap.MAP_POPULATE),
    "mmap + MADV_POPULATE_WRITE/1MiB": _mmap_variant(prefault=_populate_write),
    "mmap + touch pages ahead/1MiB": _mmap_variant(prefault=_touch_pages),
}


def measure(directory: str, total_bytes: int, block_bytes: int, rounds: int) -> dict:
    """{variant: (MiB/s, p99.9 µs, max µs)}, best round by throughput."""
    rng = random.Random(1)
    block = rng.randbytes(block_bytes)
    blocks = [block] * (total_bytes // block_bytes)
    size = len(blocks) * block_bytes
    path = os.path.join(directory, "bench.log")
    os.sync()
    best: dict[str, tuple] = {}
    for _ in range(rounds):
        for name, run in VARIANTS.items():
            lat: list[int] = []
            try:
                fd = run(path, blocks, size, lat)
            except OSError as exc:  # e.g. MADV_POPULATE_WRITE on an old kernel
                print(f"  {name}: unavailable ({exc})")
                continue
            os.close(fd)
            os.unlink(path)
            os.sync()  # leave no dirty pages for the next variant to pay for
            lat.sort()
            figures = (size / sum(lat) * 1e9 / 2**20, lat[int(0.999 * (len(lat) - 1))] / 1000,
                       lat[-1] / 1000)
            if name not in best or figures[0] > best[name][0]:
                best[name] = figures
    return best


def report(results: dict, block_bytes: int) -> None:
    base = results["os.write, plain file (baseline)"][0]
    print(f"\nblock {block_bytes // 1024} KiB{'':26s}  MiB/s  ratio  p99.9 us   max us")
    for name, (mib_s, p999, top) in results.items():
        print(f"  {name:36s} {mib_s:6.0f}  x{mib_s / base:4.2f}  {p999:8.1f} {top:8.1f}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)
    total = (64 if args.quick else 256) * 2**20
    rounds = 2 if args.quick else 3
    out = {}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="klog-bench-") as directory:
        print(f"mmap vs write append paths: {total >> 20} MiB per variant, best of {rounds}, "
              f"in {directory}")
        for block_bytes in (1024, 4 * 1024, 16 * 1024, 64 * 1024, 1024 * 1024):
            out[block_bytes] = measure(directory, total, block_bytes, rounds)
            report(out[block_bytes], block_bytes)
    return out


if __name__ == "__main__":
    main()
