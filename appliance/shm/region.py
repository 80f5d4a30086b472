"""The POSIX shared-memory object behind the index: create, attach, reclaim, unlink.

The only module that imports posix_ipc (STYLE rule 9). One region per appliance, named from the
config so that `klog status --config FILE` finds it without a network call:
``/klog-<broker.id>-<10 hex digits of sha1(realpath(first log dir))>`` (:func:`region_name`).

Life cycle:

- The supervisor calls :func:`create_region`: ``O_CREAT|O_EXCL``; the whole size is reserved
  with ``posix_fallocate`` so a too-small /dev/shm (Docker: 64 MB) fails here with ENOSPC and
  the figure, never later with SIGBUS on a page fault; the header is written with its magic
  last. If the name exists, its header decides: a live supervisor (pid alive, same start time
  in /proc, not a zombie) means :class:`RegionInUseError`; anything else (a kill -9 left it,
  or a crash during creation) is unlinked and created afresh (``reclaimed_from_pid`` says so).
- Workers forked afterwards inherit the MAP_SHARED mapping; a process started otherwise uses
  :func:`attach_region`. ``read_only=True`` is for `klog status`: no create, no unlink, and
  any write raises TypeError.
- The supervisor calls :meth:`Region.unlink` on stop: the name leaves /dev/shm at once and
  the memory goes when the last mapping does. Without an unlink the object would outlive every
  process until reboot, which is why the next start reclaims it.

Under systemd run klog as a system user: logind's RemoveIPC=yes deletes a regular user's IPC
objects when their last session ends (libs.md).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import time

import posix_ipc

from . import seqlock
from .fetch_out import FetchOutTable
from .layout import (
    GENERATION_OFFSET,
    HEADER,
    HEADER_BYTES,
    LAYOUT_VERSION,
    MAGIC,
    MAGIC_PREFIX,
    PAGE,
    Geometry,
    Header,
    read_header,
    write_header,
)
from .metrics_area import MetricsAreas
from .partition_table import PartitionTable
from .status import Snapshot, snapshot
from .worker_table import WorkerTable

CREATION_GRACE_S = 5.0  # a header-less region younger than this is being created right now


class RegionError(Exception):
    """Base of the region's errors; the message says what to do."""


class RegionInUseError(RegionError):
    """A live appliance already owns this region (same config)."""

    def __init__(self, message: str, pid: int = 0):
        super().__init__(message)
        self.pid = pid


class RegionNotFoundError(RegionError):
    """No region with this name: no appliance with this config is running."""


class RegionLayoutError(RegionError):
    """The object exists but is not a complete region of this klog's layout version."""


class RegionSpaceError(RegionError):
    """/dev/shm cannot hold the region."""


def region_name(broker_id: int, first_log_dir: str | os.PathLike) -> str:
    """The region's name for an appliance: stable for a config, distinct across configs."""
    digest = hashlib.sha1(os.path.realpath(first_log_dir).encode()).hexdigest()[:10]
    return f"/klog-{broker_id}-{digest}"


class Region:
    """A mapped region: ``partitions``, ``workers`` and ``fetch_out`` are its typed accessors
    (each usable on its own over any buffer; the region only maps the memory)."""

    def __init__(self, name: str, buf: mmap.mmap, header: Header, *, read_only: bool,
                 reclaimed_from_pid: int = 0):
        self.name = name
        self.buf = buf
        self.header = header
        self.geometry = Geometry.of(header)
        self.read_only = read_only
        self.reclaimed_from_pid = reclaimed_from_pid
        self.partitions = PartitionTable(buf, self.geometry)
        self.workers = WorkerTable(buf, self.geometry)
        self.fetch_out = FetchOutTable(buf, self.geometry)
        self.metrics = MetricsAreas(buf, self.geometry)

    @property
    def generation(self) -> int:
        return seqlock.load(self.buf, GENERATION_OFFSET)

    def snapshot(self, *, now_ms: int | None = None) -> Snapshot:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return snapshot(self.name, self.header, self.generation, self.workers, self.partitions,
                        self.fetch_out, now_ms=now)

    def close(self) -> None:
        """Unmap (this process only). Idempotent."""
        if not self.buf.closed:
            self.buf.close()

    def unlink(self) -> None:
        """Remove the name from /dev/shm (the supervisor, on stop). Mappings stay valid."""
        if self.read_only:
            raise RegionError(f"{self.name} is attached read-only; only its creator unlinks it")
        unlink_region(self.name)

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_region(name: str, geometry: Geometry, *, broker_id: int = 0,
                  supervisor_pid: int | None = None, now_ms: int | None = None) -> Region:
    """Create the region (the supervisor, at start). Raises RegionInUseError if a live
    supervisor holds it, RegionSpaceError if /dev/shm is too small."""
    pid = os.getpid() if supervisor_pid is None else supervisor_pid
    reclaimed = 0
    for _ in range(3):
        try:
            shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600)
            break
        except posix_ipc.ExistentialError:
            reclaimed = _reclaim_or_refuse(name) or reclaimed
    else:
        raise RegionInUseError(f"{name} keeps reappearing: another appliance with this config "
                               f"is starting")
    size = geometry.total_bytes
    try:
        os.posix_fallocate(shm.fd, 0, size)
        buf = mmap.mmap(shm.fd, size)
    except OSError as exc:
        unlink_region(name)
        raise RegionSpaceError(
            f"cannot reserve {size / 2**20:.1f} MiB of shared memory for {name} "
            f"({geometry.max_workers} workers, {geometry.max_partitions} partition slots, "
            f"{geometry.index_entries} index entries each): {exc.strerror}; enlarge /dev/shm "
            f"(Docker: --shm-size) or lower the partition slots") from exc
    finally:
        shm.close_fd()
    header = Header(MAGIC, LAYOUT_VERSION, HEADER_BYTES, size, geometry.max_workers,
                    geometry.max_partitions, geometry.index_entries, broker_id, pid,
                    process_start_ticks(pid) or 0,
                    int(time.time() * 1000) if now_ms is None else now_ms)
    write_header(buf, header)
    return Region(name, buf, header, read_only=False, reclaimed_from_pid=reclaimed)


def attach_region(name: str, *, read_only: bool = False) -> Region:
    """Map an existing region (a worker not forked from the supervisor; `klog status`)."""
    try:
        shm = posix_ipc.SharedMemory(name, read_only=read_only)
    except posix_ipc.ExistentialError:
        raise RegionNotFoundError(f"no shared-memory region {name}: no appliance with this "
                                  f"config is running") from None
    except posix_ipc.PermissionsError as exc:
        raise RegionError(f"{name}: {exc}: run as the appliance's user") from None
    try:
        if shm.size < HEADER_BYTES:
            raise RegionLayoutError(f"{name} is {shm.size} bytes: not (yet) a klog region")
        prot = mmap.PROT_READ if read_only else mmap.PROT_READ | mmap.PROT_WRITE
        buf = mmap.mmap(shm.fd, shm.size, prot=prot)
    finally:
        shm.close_fd()
    header = read_header(buf)
    problem = _layout_problem(header, len(buf))
    if problem:
        buf.close()
        raise RegionLayoutError(f"{name}: {problem}")
    return Region(name, buf, header, read_only=read_only)


def refuse_if_in_use(name: str) -> None:
    """Raise RegionInUseError if a live supervisor holds region ``name``; change nothing.

    For a supervisor about to wait for its log dirs' locks (appliance/log_dir_lock.py): an
    appliance running with the same config will not go away, so waiting would only delay the
    refusal. A region that is absent, unreadable or a dead supervisor's is not in use here;
    `create_region` decides about it once the locks are held."""
    try:
        region = attach_region(name, read_only=True)
    except RegionError:
        return
    header = region.header
    region.close()
    if process_alive(header.supervisor_pid, header.supervisor_start_ticks):
        raise RegionInUseError(f"an appliance with this config is already running, pid "
                               f"{header.supervisor_pid} (shared memory {name})",
                               header.supervisor_pid)


def unlink_region(name: str) -> bool:
    """Remove the name; False if it was already gone."""
    try:
        posix_ipc.unlink_shared_memory(name)
        return True
    except posix_ipc.ExistentialError:
        return False


def _layout_problem(header: Header, size: int) -> str | None:
    if header.magic != MAGIC:
        return f"magic {header.magic!r}, expected {MAGIC!r} (not a klog region of this version)"
    if header.layout_version != LAYOUT_VERSION:
        return f"layout version {header.layout_version}, this klog reads {LAYOUT_VERSION}"
    try:
        expected = Geometry.of(header).total_bytes
    except ValueError as exc:
        return f"bad geometry: {exc}"
    if not header.total_bytes == expected == size:
        return (f"sizes disagree: header says {header.total_bytes}, geometry {expected}, "
                f"object {size}")
    return None


def _reclaim_or_refuse(name: str) -> int:
    """Unlink a stale region and return its dead supervisor's pid (0 if unknown); raise
    RegionInUseError if its supervisor lives."""
    try:
        shm = posix_ipc.SharedMemory(name, read_only=True)
    except posix_ipc.ExistentialError:
        return 0  # gone meanwhile: just create
    except posix_ipc.PermissionsError as exc:
        raise RegionInUseError(f"{name} exists and belongs to another user ({exc}); another "
                               f"appliance with this config, or remove it by hand") from None
    try:
        age_s = time.time() - os.fstat(shm.fd).st_mtime
        raw = b""
        if shm.size >= HEADER.size:
            with mmap.mmap(shm.fd, PAGE if shm.size >= PAGE else shm.size,
                           prot=mmap.PROT_READ) as m:
                raw = m[:HEADER.size]
    finally:
        shm.close_fd()
    if raw.startswith(MAGIC_PREFIX):  # pid and start ticks keep their offsets in every version
        header = read_header(raw)
        if process_alive(header.supervisor_pid, header.supervisor_start_ticks):
            raise RegionInUseError(f"an appliance with this config is already running, pid "
                                   f"{header.supervisor_pid} (shared memory {name})",
                                   header.supervisor_pid)
        pid = header.supervisor_pid
    elif age_s < CREATION_GRACE_S:
        raise RegionInUseError(f"{name} is being created by another process right now")
    else:
        pid = 0
    unlink_region(name)
    return pid


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22)."""
    fields = _proc_stat(pid)
    return None if fields is None else int(fields[19])


def process_alive(pid: int, start_ticks: int = 0) -> bool:
    """True if ``pid`` runs and is the process that started at ``start_ticks`` (0: any).
    A zombie (killed, not yet reaped) is dead; so is a recycled pid."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    fields = _proc_stat(pid)
    if fields is None:
        return True  # no /proc: trust kill(0)
    if fields[0] in (b"Z", b"X"):
        return False
    return not start_ticks or int(fields[19]) == start_ticks


def _proc_stat(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat from field 3 (state) on; the command name may hold spaces and ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
