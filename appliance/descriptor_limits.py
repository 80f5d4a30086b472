"""Start-up checks of the descriptor and mapping limits against the partitions on disk.

Why: each segment of a partition costs its worker one descriptor (the ``.log``) and up to two
memory mappings (its indexes; ``appliance/segments/fdless_map.py``). A shell's default soft
RLIMIT_NOFILE (often 1,024) holds a few hundred partitions, and at ~8,000 partitions the
workers of a 20,000 hard limit ran out (issue 26). So the supervisor raises the soft limit to
the hard one before it forks (workers inherit it), counts what the log dirs hold, and warns
with the numbers when a worker's share does not fit, instead of letting EMFILE surprise a
CreateTopics later. Nothing is refused at start: the partitions that fit are served, those
that do not answer KAFKA_STORAGE_ERROR naming the limit (``replication/replicas.py``).

:func:`room_for` is the worker's check before a CreateTopics that would not fit.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from appliance.segments import descriptor_limit
from appliance.segments.descriptor_cache import CACHE

log = logging.getLogger("klog.limits")

# descriptors a worker needs beside its segments: listeners, the control channel, the shm
# region, locks, connections of clients and peers (a generous allowance)
BASE_DESCRIPTORS = 256
# mappings beside the indexes: the interpreter, its libraries, the shm region, heap arenas
BASE_MAPPINGS = 2048


@dataclass(frozen=True)
class DiskCount:
    log_dir: str
    partitions: int
    segments: int

    @property
    def descriptors(self) -> int:
        return self.segments + BASE_DESCRIPTORS

    @property
    def mappings(self) -> int:
        return 2 * self.segments + BASE_MAPPINGS


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one (capped by fs.nr_open); returns
    (before, after). Never fails: a refused raise leaves the limit as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        target = _read_int("/proc/sys/fs/nr_open", 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise RLIMIT_NOFILE from %d to %d: %s", soft, target, exc)
            return soft, soft
        return soft, target
    return soft, soft


def count_disk(log_dir: Path) -> DiskCount:
    """Partition directories and ``.log`` segment files under one log dir (one scandir per
    partition: ~0.1 s for 10,000)."""
    partitions = segments = 0
    try:
        entries = list(os.scandir(log_dir))
    except OSError:
        return DiskCount(str(log_dir), 0, 0)
    for entry in entries:
        if not entry.is_dir() or "-" not in entry.name or entry.name.endswith("-delete"):
            continue
        partitions += 1
        try:
            segments += sum(1 for name in os.listdir(entry.path) if name.endswith(".log"))
        except OSError:
            continue
    return DiskCount(str(log_dir), partitions, segments)


def check_at_start(log_dirs) -> list[str]:
    """Raise the soft limit, count each log dir and warn (returned too, for tests) when a
    worker's share does not fit RLIMIT_NOFILE or vm.max_map_count."""
    before, soft = raise_soft_limit()
    if soft != before:
        log.info("raised the soft RLIMIT_NOFILE from %d to %d (the hard limit)", before, soft)
    max_maps = _read_int("/proc/sys/vm/max_map_count", 65530)
    warnings = []
    for log_dir in log_dirs:
        disk = count_disk(Path(log_dir))
        if disk.descriptors > soft:
            warnings.append(
                f"{disk.log_dir} holds {disk.partitions} partitions in {disk.segments} segment "
                f"files: its worker needs about {disk.descriptors} descriptors, but "
                f"RLIMIT_NOFILE is {soft} (hard {resource.getrlimit(resource.RLIMIT_NOFILE)[1]})"
                f"; partitions beyond it will answer KAFKA_STORAGE_ERROR. Raise `ulimit -n` "
                f"(systemd: LimitNOFILE=) or use larger segments (README 'Limits')")
        if disk.mappings > max_maps:
            warnings.append(
                f"{disk.log_dir} holds {disk.segments} segment files: its worker needs about "
                f"{disk.mappings} memory mappings, but vm.max_map_count is {max_maps}; raise "
                f"it (sysctl vm.max_map_count) or use larger segments (README 'Limits')")
    for text in warnings:
        log.warning("%s", text)
    return warnings


def room_for(new_partitions: int) -> str | None:
    """None when this worker can open ``new_partitions`` more logs (one descriptor each)
    and keep BASE_DESCRIPTORS spare; otherwise the reason, naming the limit."""
    soft, _ = descriptor_limit.limits()
    held = descriptor_limit.open_count()
    if held < 0 or held + new_partitions + BASE_DESCRIPTORS <= soft:
        return None
    return (f"not enough file descriptors for {new_partitions} more partition logs on this "
            f"worker: {descriptor_limit.note()}")


def configure_worker(config, *, serving: bool) -> int:
    """Bound this worker's open sealed segments (``log.open.segments.max``; 0: half the soft
    RLIMIT_NOFILE); the calling thread becomes the one that evicts. Before ``serving`` no
    read is in flight, so evicted descriptors close at once (opening 10,000 logs must not
    pile them up for file.delete.delay.ms). Returns the bound."""
    limit = config.log_open_segments_max or max(descriptor_limit.limits()[0] // 2, 64)
    grace_s = config.log_defaults.file_delete_delay_ms / 1000 if serving else 0.0
    CACHE.configure(limit, grace_s)
    return limit


def _read_int(path: str, default: int) -> int:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return default
