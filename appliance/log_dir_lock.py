"""Each log dir's `.lock`: one appliance, with its workers, per log dir (Kafka's rule).

Two appliances on one log dir destroy it: one recovers (truncates) the segments the other
still appends to or has mmap'd (SIGBUS), reads half-written batches, loses acknowledged bytes.
It happens without an operator's mistake: a kill -9 of the supervisor alone leaves its workers
running their graceful stop (seconds under load), and a restart (systemd's, or a person's)
starts new workers on the same disks at once. Kafka keeps a `.lock` file in every log dir,
locked exclusively for the broker's life; so does klog, with its own process model:

- The supervisor takes every log dir's lock (`flock(LOCK_EX | LOCK_NB)`) before it touches
  the dirs (shm region, catalog, meta.properties, the workers' recovery).
- flock locks belong to the open file description, so the workers, forked by the supervisor
  (directly or by the fork server), share the locks through the descriptors they inherit.
  A lock is released when the last of supervisor, fork server and workers closes it: a new
  appliance cannot start while a worker of the old one still runs. Every worker holds every
  dir's lock, not only its own, because any worker reads (mmaps) any partition's files.
- A worker restarted by the supervisor inherits the descriptors again; it never locks itself.
- The descriptors are O_CLOEXEC: a program exec'd by anyone in the appliance does not inherit
  them (only fork does).
- The file is never deleted, not even on a clean stop (as in Kafka): a second process that
  found the name unlinked would create and lock a new inode while the old one is still held.
  After taking a lock we check that the name still leads to the locked inode, for an operator
  who deletes the file by hand.

When a lock is held, start-up waits for it (the holder is usually an old appliance's workers
finishing their stop), logging once per dir, up to `lock_wait_s(shutdown.timeout.ms)`: the
time a worker's graceful stop may take, plus a margin. Then it refuses with
`LogDirLockedError`, naming the dir. Read-only tools (`klog dump-log`, `klog status`) and
tools that serialise on their own files (`klog users`, `klog acls`) take no log dir lock.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"  # Kafka's name
WAIT_MARGIN_S = 10.0  # beyond shutdown.timeout.ms: exit, unmapping, the last close
POLL_INTERVAL_S = 0.1


class LogDirLockedError(RuntimeError):
    """Another process (another appliance, or workers of one) holds a log dir's lock."""

    def __init__(self, log_dir: Path, waited_s: float):
        path = Path(log_dir) / LOCK_FILE
        super().__init__(
            f"failed to acquire the lock on {LOCK_FILE} in {log_dir} (waited {waited_s:.0f} s): "
            f"another klog appliance (or its workers) is using this directory; "
            f"`fuser -v {path}` lists the processes holding it")
        self.log_dir = Path(log_dir)


def lock_wait_s(shutdown_timeout_ms: int) -> float:
    """How long start-up waits for a held lock: a worker's graceful stop, plus a margin."""
    return shutdown_timeout_ms / 1000 + WAIT_MARGIN_S


class LogDirLocks:
    """The locks the supervisor holds for its life (and its workers, by inheritance)."""

    def __init__(self, fds: dict[Path, int]):
        self._fds = dict(fds)

    def fds(self) -> list[int]:
        return list(self._fds.values())

    def close(self) -> None:
        """Close our descriptors: the locks go when no forked process holds them either."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def lock_log_dirs(log_dirs: Iterable[os.PathLike | str], *, wait_s: float,
                  poll_s: float = POLL_INTERVAL_S) -> LogDirLocks:
    """Lock every log dir (they must exist), waiting at most `wait_s` in all.

    Raises LogDirLockedError naming the first dir still locked at the deadline, OSError if a
    lock file cannot be opened; in both cases the locks already taken are released."""
    started = time.monotonic()
    taken: dict[Path, int] = {}
    try:
        for log_dir in map(Path, log_dirs):
            taken[log_dir] = _lock_one(log_dir, started, wait_s, poll_s)
    except BaseException:
        LogDirLocks(taken).close()
        raise
    return LogDirLocks(taken)


def _lock_one(log_dir: Path, started: float, wait_s: float, poll_s: float) -> int:
    waiting = False
    while True:
        fd = try_lock(log_dir)
        if fd is not None:
            if waiting:
                log.info("%s: got its lock after %.1f s", log_dir, time.monotonic() - started)
            return fd
        waited_s = time.monotonic() - started
        if waited_s >= wait_s:
            raise LogDirLockedError(log_dir, waited_s)
        if not waiting:
            waiting = True
            log.warning("%s is locked by another klog appliance or its workers (stopping after "
                        "a kill of their supervisor?); waiting up to %.0f s for it", log_dir,
                        wait_s - waited_s)
        time.sleep(poll_s)


def try_lock(log_dir: Path) -> int | None:
    """The descriptor holding `log_dir`'s lock, or None if another open file holds it.
    Raises OSError (naming the file) if it cannot be created or locked at all."""
    path = Path(log_dir) / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:  # e.g. a file system without flock: say which file
            os.close(fd)
            raise OSError(exc.errno, f"cannot lock {path}: {exc.strerror}") from None
        except BaseException:
            os.close(fd)
            raise
        if _still_named(fd, path):
            return fd
        os.close(fd)  # the file was deleted or replaced meanwhile: lock what the name is now


def _still_named(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
