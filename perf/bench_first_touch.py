"""Why a rate measured against the page cache moves between rounds of the same code.

Writes of 1 MiB into new files kept side by side (the page cache takes memory it has not
used lately) against the same writes right after a file of the same size was deleted (it
takes the memory just freed). On a VM whose memory the host backs on first touch, or takes
back when the guest frees it, the first kind runs at a fraction of the second's speed: on
this 2-core VM, 512 MiB per file, 552-759 MB/s against 2.9-3.0 GB/s (another run: 520-630
against 1.9 GB/s). bench_replication.py's raw sendfile loop writes into the page
cache too, which is why it runs just before and just after each catch-up.

Run: .venv/bin/python perf/bench_first_touch.py [--mb 1024] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

MIB = 1 << 20


def write_file(path: str, mib: int, block: bytes) -> float:
    """MB/s of `mib` pwrites of 1 MiB into a new file at `path`."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        for i in range(mib):
            os.pwrite(fd, block, i * MIB)
        return mib * MIB / 1e6 / (time.perf_counter() - start)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=1024, help="MiB per file")
    parser.add_argument("--dir", default=None, help="where the files go (a disk, not tmpfs)")
    args = parser.parse_args()
    block = os.urandom(MIB)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        kept = [write_file(os.path.join(tmp, f"kept-{i}"), args.mb, block) for i in range(3)]
        reused = []
        for i in range(2):  # each right after deleting a file of the same size
            os.unlink(os.path.join(tmp, f"kept-{2 - i}"))
            reused.append(write_file(os.path.join(tmp, f"reused-{i}"), args.mb, block))
    print(f"1 MiB pwrites, {args.mb} MiB per file")
    print("  into new files kept side by side: " + ", ".join(f"{r:,.0f}" for r in kept)
          + " MB/s")
    print("  right after deleting one:         " + ", ".join(f"{r:,.0f}" for r in reused)
          + " MB/s")


if __name__ == "__main__":
    main()
