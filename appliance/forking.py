"""How the supervisor forks a worker: directly, or through a fork server when threads run.

Alone, the supervisor has one thread and forks each worker itself (`DirectForker`). In cluster
mode kazoo runs threads in the supervisor, and a fork taken while another thread holds a lock
(logging's, stdio's, kazoo's own) leaves the child holding it forever. So, before kazoo starts,
the supervisor starts a fork server (`ForkServer`): a child with one thread that forks every
worker from then on. It forks twice, so the worker is orphaned at once and re-parented to the
supervisor, which declared itself a child subreaper (`PR_SET_CHILD_SUBREAPER`): reaping, exit
codes and signals stay exactly those of a directly forked worker. The supervisor's end of the
worker's control channel comes back over a Unix socket (SCM_RIGHTS) with the worker's pid.

Both forkers return `(pid, parent_end)`. fork, signals and waitpid belong to the supervisor and
the worker entry point only (STYLE.md); this module is the supervisor's.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import struct
from collections.abc import Callable

from appliance.exit_codes import BOOT_ERROR

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PID = struct.Struct(">i")

# worker_child(index, child_end) -> exit code; runs in the forked worker, after signal resets
WorkerChild = Callable[[int, socket.socket], int]


class ForkError(RuntimeError):
    """A worker could not be forked (the fork server is gone, or fork itself failed)."""


def _reset_signals(signals) -> None:
    for signum in signals:
        signal.signal(signum, signal.SIG_DFL)


def _close_all(items: list) -> None:
    """Close inherited descriptors (ints) and sockets that belong to other processes."""
    for item in items:
        if isinstance(item, int):
            os.close(item)
        else:
            item.close()


def _run_child(worker_child: WorkerChild, index: int, child_end: socket.socket,
               close: list) -> None:
    """In the worker: close what belongs to others, run it, and exit with its code."""
    code = BOOT_ERROR
    try:
        _close_all(close)
        code = worker_child(index, child_end)
    except BaseException:
        log.exception("worker %d failed to boot", index)
    finally:
        os._exit(code)


class DirectForker:
    """fork(2) from the supervisor itself: safe while the supervisor has a single thread."""

    def __init__(self, worker_child: WorkerChild, *, signals, close_in_child: Callable[[], list]):
        self.worker_child = worker_child
        self.signals = signals
        self.close_in_child = close_in_child

    def fork(self, index: int) -> tuple[int, socket.socket]:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            _reset_signals(self.signals)
            _run_child(self.worker_child, index, child_end, [parent_end, *self.close_in_child()])
        child_end.close()
        return pid, parent_end

    def close(self) -> None:
        pass


def become_subreaper() -> None:
    """Orphaned descendants (the fork server's workers) become our children again."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(errno)}")


class ForkServer:
    """A single-threaded child that forks workers on request. Start it before any thread."""

    def __init__(self, worker_child: WorkerChild, *, signals, close_in_child: Callable[[], list]):
        become_subreaper()
        self._requests, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.pid = os.fork()
        if self.pid == 0:
            _reset_signals(signals)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = 0
            try:
                _close_all([self._requests, *close_in_child()])
                _serve(server_end, worker_child)
            except BaseException:
                log.exception("the fork server failed")
                code = 1
            finally:
                os._exit(code)
        server_end.close()

    def fork(self, index: int) -> tuple[int, socket.socket]:
        try:
            self._requests.sendall(PID.pack(index))
            data, fds, _, _ = socket.recv_fds(self._requests, PID.size, 1)
        except OSError as exc:
            raise ForkError(f"the fork server is gone: {exc}") from None
        if len(data) != PID.size:
            raise ForkError("the fork server closed its socket")
        (pid,) = PID.unpack(data)
        if pid <= 0 or not fds:
            for fd in fds:
                os.close(fd)
            raise ForkError(f"the fork server could not fork worker {index}")
        return pid, socket.socket(fileno=fds[0])

    def close(self) -> None:
        """Closing the request socket ends the server; the supervisor reaps it like a worker."""
        self._requests.close()


def _serve(requests: socket.socket, worker_child: WorkerChild) -> None:
    while True:
        data = requests.recv(PID.size)
        if len(data) < PID.size:
            return  # the supervisor is gone or closed us
        (index,) = PID.unpack(data)
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid = _fork_orphan(worker_child, index, child_end, [requests, parent_end])
        except OSError as exc:
            log.error("fork server: cannot fork worker %d: %s", index, exc)
            pid = -1
        child_end.close()
        socket.send_fds(requests, [PID.pack(pid)], [parent_end.fileno()] if pid > 0 else [])
        parent_end.close()


def _fork_orphan(worker_child: WorkerChild, index: int, child_end: socket.socket,
                 close: list) -> int:
    """Fork an intermediate that forks the worker and exits at once: the worker's pid."""
    read_fd, write_fd = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        os.close(read_fd)
        worker = os.fork()
        if worker == 0:
            _run_child(worker_child, index, child_end, [write_fd, *close])
        os.write(write_fd, PID.pack(worker))
        os._exit(0)
    os.close(write_fd)
    try:
        data = os.read(read_fd, PID.size)
    finally:
        os.close(read_fd)
        os.waitpid(intermediate, 0)
    if len(data) != PID.size:
        raise OSError(f"the intermediate process of worker {index} died before forking it")
    return PID.unpack(data)[0]
