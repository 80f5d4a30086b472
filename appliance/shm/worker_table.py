"""Worker slots: who serves where, whether it is alive, and what it has done.

A slot has two seqlocked parts with one writer each (layout.py has the fields):

- the **static part**, written by the supervisor: pid, port, the state it knows (STARTING
  before a fork, DEAD or FAILED after reaping), restarts, start time, log dir;
- the **live part**, written by the worker itself: its pid, the state it reports (SERVING,
  STOPPING), its heartbeat (~every second) and cumulative counters.

The state a reader should believe is :attr:`WorkerView.state`: the worker's report while the
supervisor considers that same pid running, else the supervisor's. Liveness is
:meth:`WorkerView.heartbeat_age_ms`; the supervisor kills a worker whose age passes its
timeout. A live part left mid-update (the worker died inside a write) reads as no heartbeat at
all, so a hung writer still looks stale; the worker's next incarnation repairs it with
:meth:`WorkerTable.claim_worker`, which keeps the counters when they are readable, so they stay
cumulative across restarts.

What can fail: TornEntryError from a worker's own update if it skipped claim_worker after a
crash; IndexError for an index outside max_workers; ValueError for out-of-range values
(checked before anything is written).
"""

from __future__ import annotations

from typing import NamedTuple

from . import seqlock
from .layout import (
    SEQ_BYTES,
    WORKER_LIVE,
    WORKER_LIVE_OFFSET,
    WORKER_PUBLISHED_OFFSET,
    WORKER_STATIC,
    Geometry,
    WorkerState,
    decode_name,
    encode_name,
)

_U64_MAX = (1 << 64) - 1
_RUNNING = (WorkerState.STARTING, WorkerState.SERVING, WorkerState.STOPPING)
_armed = seqlock.armed


class WorkerView(NamedTuple):
    """One worker slot as read at one moment (each part consistent on its own)."""

    index: int
    pid: int
    port: int
    supervisor_state: WorkerState
    restarts: int
    started_at_ms: int
    log_dir: str
    live_pid: int  # 0 while the live part is torn or the worker never claimed it
    reported_state: WorkerState
    heartbeat_ms: int
    bytes_in: int
    records_in: int
    bytes_out: int
    records_out: int
    requests: int
    live_torn: bool  # the live part was left mid-update: counters unknown (zeros here)

    @property
    def state(self) -> WorkerState:
        if (self.supervisor_state in _RUNNING and self.live_pid == self.pid and self.pid
                and self.reported_state in _RUNNING):
            return self.reported_state
        return self.supervisor_state

    def heartbeat_age_ms(self, now_ms: int) -> int:
        """Milliseconds since this incarnation last showed life (its fork counts as one)."""
        beat = self.heartbeat_ms if self.live_pid == self.pid else 0
        return now_ms - max(beat, self.started_at_ms)


class WorkerTable:
    """The worker slots of one mapped region (``buf``: an mmap, or a bytearray in tests)."""

    def __init__(self, buf, geometry: Geometry, *, timeout_s: float = seqlock.DEFAULT_TIMEOUT_S):
        self._buf = buf
        self.geometry = geometry
        self.timeout_s = timeout_s
        self._live = [geometry.worker_slot(i) + WORKER_LIVE_OFFSET
                      for i in range(geometry.max_workers)]
        self._published = [geometry.worker_slot(i) + WORKER_PUBLISHED_OFFSET
                           for i in range(geometry.max_workers)]

    # -- the supervisor ------------------------------------------------------------------------

    def set_worker(self, index: int, *, pid: int, port: int, state: WorkerState, restarts: int,
                   started_at_ms: int, log_dir: str) -> None:
        """Write the whole static part."""
        raw = encode_name(log_dir, "log dir path")
        body = WORKER_STATIC.pack(index, pid, port, state, restarts, len(raw), started_at_ms,
                                  raw)
        off = self.geometry.worker_slot(index)
        odd = seqlock.begin_repair(self._buf, off)  # the supervisor is its only writer
        self._buf[off + SEQ_BYTES:off + SEQ_BYTES + WORKER_STATIC.size] = body
        seqlock.end(self._buf, off, odd)

    def update_worker(self, index: int, *, pid: int | None = None, port: int | None = None,
                      state: WorkerState | None = None, restarts: int | None = None,
                      started_at_ms: int | None = None) -> None:
        """Change some static fields, keeping the others (e.g. state after a reap)."""
        view = self._read_static(index)
        self.set_worker(
            index, pid=view[1] if pid is None else pid, port=view[2] if port is None else port,
            state=view[3] if state is None else state,
            restarts=view[4] if restarts is None else restarts,
            started_at_ms=view[5] if started_at_ms is None else started_at_ms, log_dir=view[6])

    # -- the worker ----------------------------------------------------------------------------

    def claim_worker(self, index: int, *, pid: int, now_ms: int) -> None:
        """A worker's first write after it starts: (re)write its live part whatever state the
        previous incarnation left it in, keeping readable counters, and repair its fetch-out
        table's sequence (a torn cell keeps whatever half-count it has: counters only)."""
        off = self.geometry.worker_slot(index) + WORKER_LIVE_OFFSET
        counters = (0, 0, 0, 0, 0)
        if not seqlock.is_torn(self._buf, off):
            counters = self._read_live(index)[3:]
        body = WORKER_LIVE.pack(pid, WorkerState.STARTING, now_ms, *counters)
        odd = seqlock.begin_repair(self._buf, off)
        self._buf[off + SEQ_BYTES:off + SEQ_BYTES + WORKER_LIVE.size] = body
        seqlock.end(self._buf, off, odd)
        table = self.geometry.out_table(index)
        if seqlock.is_torn(self._buf, table):
            seqlock.end(self._buf, table, seqlock.begin_repair(self._buf, table))

    def heartbeat(self, index: int, now_ms: int) -> None:
        self._update_live(index, heartbeat_ms=now_ms)

    def report_state(self, index: int, state: WorkerState, now_ms: int) -> None:
        """The worker says SERVING (listening) or STOPPING (graceful stop begun)."""
        self._update_live(index, reported_state=state, heartbeat_ms=now_ms)

    def add_worker_counters(self, index: int, *, bytes_in: int = 0, records_in: int = 0,
                            bytes_out: int = 0, records_out: int = 0,
                            requests: int = 0) -> None:
        """Add to the cumulative counters (cheap enough to call per request)."""
        buf, off = self._buf, self._live_offset(index)
        start = off + SEQ_BYTES
        pid, state, beat, b_in, r_in, b_out, r_out, reqs = WORKER_LIVE.unpack_from(buf, start)
        self._write_live(index, off, WORKER_LIVE.pack(
            pid, state, beat, b_in + bytes_in, r_in + records_in, b_out + bytes_out,
            r_out + records_out, reqs + requests))

    def _update_live(self, index: int, *, heartbeat_ms: int | None = None,
                     reported_state: WorkerState | None = None) -> None:
        off = self._live_offset(index)
        pid, state, beat, *counters = WORKER_LIVE.unpack_from(self._buf, off + SEQ_BYTES)
        self._write_live(index, off, WORKER_LIVE.pack(
            pid, state if reported_state is None else reported_state,
            beat if heartbeat_ms is None else heartbeat_ms, *counters))

    def note_published(self, index: int) -> None:
        """Worker `index` (the only writer) published a partition's log part: its counter
        moves. One load and one store."""
        off = self._published[index]
        seqlock.store(self._buf, off, (seqlock.load(self._buf, off) + 1) & _U64_MAX)

    def publications(self) -> tuple[int, ...]:
        """Every worker's counter of publishes, in one pass: equal to an earlier result means
        no worker published anything in between (a torn reading only delays that news to the
        next call, the counters only grow)."""
        buf, load = self._buf, seqlock.load
        return tuple(load(buf, off) for off in self._published)

    def _live_offset(self, index: int) -> int:
        if index < 0:
            raise IndexError(f"worker index {index} out of range")
        return self._live[index]

    def _write_live(self, index: int, off: int, body: bytes) -> None:
        buf = self._buf
        seq = seqlock.load(buf, off)
        if seq & 1:  # the previous incarnation died mid-update: claim_worker repairs it
            raise seqlock.TornEntryError(f"worker {index} (live part)", off, seq)
        seqlock.store(buf, off, seq + 1)
        buf[off + SEQ_BYTES:off + SEQ_BYTES + WORKER_LIVE.size] = body
        if _armed:
            seqlock.fire("worker.live.mid_write")
        seqlock.store(buf, off, seq + 2)

    # -- readers -------------------------------------------------------------------------------

    def read_worker(self, index: int) -> WorkerView:
        """Both parts of a slot; a torn live part reads as zeros with ``live_torn`` set."""
        static = self._read_static(index)
        try:
            live = self._read_live(index)
            torn = False
        except seqlock.TornEntryError:
            live, torn = (0, WorkerState.EMPTY, 0, 0, 0, 0, 0, 0), True
        return WorkerView(*static, live[0], WorkerState(live[1]), *live[2:], torn)

    def workers(self) -> list[WorkerView]:
        """Every slot the supervisor has used (state not EMPTY)."""
        views = (self.read_worker(i) for i in range(self.geometry.max_workers))
        return [v for v in views if v.supervisor_state != WorkerState.EMPTY]

    def _read_static(self, index: int) -> tuple:
        off = self.geometry.worker_slot(index)
        data = seqlock.read(self._buf, off, SEQ_BYTES + WORKER_STATIC.size,
                            f"worker {index} (static part)", self.timeout_s)
        slot, pid, port, state, restarts, dir_len, started, log_dir = WORKER_STATIC.unpack(data)
        return (index, pid, port, WorkerState(state), restarts, started,
                decode_name(log_dir, dir_len))

    def _read_live(self, index: int) -> tuple:
        off = self.geometry.worker_slot(index) + WORKER_LIVE_OFFSET
        return WORKER_LIVE.unpack(seqlock.read(self._buf, off, SEQ_BYTES + WORKER_LIVE.size,
                                               f"worker {index} (live part)", self.timeout_s))
