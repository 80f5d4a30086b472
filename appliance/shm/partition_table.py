"""Partition slots: the appliance's partition directory and the hot part of each offset index.

A slot has two seqlocked parts with one writer each (layout.py has the fields):

- the **directory part** (topic, partition, owner, in_use, epoch), written by the supervisor
  when it allocates the slot at topic creation and frees it at deletion;
- the **log part** (offsets, sizes, counters and a ring of the K newest sparse offset-index
  entries of the active segment), written only by the owner worker, after every append, so
  that any worker can serve a Fetch of any partition without opening its index files.

Allocation bumps the slot's epoch and stamps it into the log part too; a reader that finds the
two epochs different has raced a reallocation and reads again. An owner passes the epoch it
attached at with every publish, so a former owner that lags behind a topic deletion gets
FreeSlotError instead of writing into the slot's next tenant.

Lookups ``(topic, partition) -> slot`` use a per-process dict rebuilt from a scan of in-use
slots whenever the header's generation (bumped after each alloc/free) changed. We chose that
over an open-addressing table in the region: a dict lookup costs ~50 ns where every probe of a
shared table costs a struct unpack plus a seqlock check, deletion needs no tombstones, and
rescans (an 8-byte load per slot, a reload per changed one: ~5 ms for 16k slots) only
follow topic creation or deletion, which are rare.

Concurrency: allocate/free/rewrite are the supervisor's and the owner's; reads are safe from
any process and thread. What can fail: TornEntryError (a dead writer's entry, until its owner
calls rewrite_partition), FreeSlotError, SlotsFullError, ValueError for out-of-range values
(checked before the entry is touched, so a bad call never leaves an entry half-written).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable
from typing import NamedTuple

from . import seqlock
from .layout import (
    GENERATION_OFFSET,
    INDEX_ENTRY,
    PARTITION_DIR,
    PARTITION_DIR_BYTES,
    PARTITION_LOG,
    PARTITION_LOG_HEAD,
    PARTITION_LOG_PUBLISH,
    SEQ,
    SEQ_BYTES,
    Geometry,
    decode_name,
    encode_name,
)
from .partition_view import IndexPosition, PartitionView
from .seqlock import TornEntryError

U32 = 0xFFFFFFFF
_IN_USE = SEQ_BYTES + 4  # byte offset of in_use inside the directory part
_LOG_WITH_SEQ = struct.Struct(SEQ.format + PARTITION_LOG.format.lstrip("<"))
_PUBLISH_AT = SEQ_BYTES + 4  # index_total onwards
_load = seqlock.load
_store = seqlock.store
_u64 = seqlock.U64.pack
_armed = seqlock.armed
_entry_pack = INDEX_ENTRY.pack_into
_new_tuple = tuple.__new__


class FreeSlotError(LookupError):
    """The slot holds no partition (never allocated, or freed: the topic was deleted)."""


class SlotsFullError(RuntimeError):
    """Every partition slot is in use: the region was created with too few (max_partitions)."""


class SlotInfo(NamedTuple):
    topic: str
    partition: int
    owner: int
    epoch: int


class _Dir(NamedTuple):
    seq: int
    epoch: int
    in_use: int
    topic: str
    partition: int
    owner: int
    prefix: tuple  # PartitionView's first fields, ready to concatenate


class PartitionTable:
    """The partition slots of one mapped region (``buf``: an mmap, or a bytearray in tests)."""

    def __init__(self, buf, geometry: Geometry, *, timeout_s: float = seqlock.DEFAULT_TIMEOUT_S):
        self._buf = buf
        self.geometry = geometry
        self.timeout_s = timeout_s
        self._base = geometry.partitions_offset
        self._stride = geometry.partition_slot_bytes
        self._count = geometry.max_partitions
        self._k = geometry.index_entries
        self._log_size = PARTITION_LOG_HEAD + INDEX_ENTRY.size * self._k
        ring_bytes = INDEX_ENTRY.size * self._k
        self._view_struct = struct.Struct(f"{PARTITION_LOG.format}{ring_bytes}s")  # + the ring
        self._dirs: dict[int, _Dir] = {}
        self._slots: dict[tuple[str, int], int] = {}
        self._generation = -1
        self._free: list[int] | None = None  # the supervisor's free slots (a heap)

    def _offset(self, slot: int) -> int:
        if not 0 <= slot < self._count:
            raise IndexError(f"partition slot {slot} out of range [0, {self._count})")
        return self._base + self._stride * slot

    # -- the supervisor ------------------------------------------------------------------------

    def allocate_partition(self, topic: str, partition: int, owner: int) -> int:
        """Give (topic, partition) a slot owned by worker ``owner``; the lowest free slot."""
        raw = encode_name(topic, "topic name")
        if not 0 <= owner < self.geometry.max_workers:
            raise ValueError(f"owner {owner} out of range [0, {self.geometry.max_workers})")
        if self.find(topic, partition) is not None:
            raise ValueError(f"{topic}-{partition} already has slot {self.find(topic, partition)}")
        free = self._free_slots()
        if not free:
            raise SlotsFullError(f"all {self._count} partition slots are in use; create the "
                                 f"region with a larger max_partitions")
        slot = heapq.heappop(free)
        off = self._offset(slot)
        epoch = (self._load_dir(slot).epoch + 1) & U32
        body = PARTITION_LOG.pack(epoch, 0, -1, -1, -1, -1, 0, 0, 0, 0, -1, 0)
        odd = seqlock.begin_repair(self._buf, off + PARTITION_DIR_BYTES)  # a dead owner's, maybe
        self._buf[off + PARTITION_DIR_BYTES + SEQ_BYTES:off + PARTITION_DIR_BYTES +
                  PARTITION_LOG_HEAD] = body
        seqlock.end(self._buf, off + PARTITION_DIR_BYTES, odd)
        if self._write_dir(off, PARTITION_DIR.pack(epoch, 1, len(raw), partition, owner, raw)):
            self._slots[(topic, partition)] = slot
        return slot

    def free_partition(self, slot: int) -> None:
        """Release a slot (topic deleted). Its owner must have stopped publishing to it."""
        current = self._load_dir(slot)
        if not current.in_use:
            raise FreeSlotError(f"partition slot {slot} is not in use")
        if self._write_dir(self._offset(slot), PARTITION_DIR.pack(current.epoch, 0, 0, -1, -1,
                                                                  b"")):
            self._slots.pop((current.topic, current.partition), None)
        if self._free is not None:
            heapq.heappush(self._free, slot)

    def _write_dir(self, off: int, body: bytes) -> bool:
        """Write a directory part and bump the generation. True if our lookup dict was current
        (the caller then updates it in place: no rescan per allocation)."""
        odd = seqlock.begin_repair(self._buf, off)
        self._buf[off + SEQ_BYTES:off + SEQ_BYTES + PARTITION_DIR.size] = body
        seqlock.end(self._buf, off, odd)
        generation = _load(self._buf, GENERATION_OFFSET)
        _store(self._buf, GENERATION_OFFSET, generation + 1)
        if self._generation != generation:
            return False
        self._generation = generation + 1
        return True

    def _free_slots(self) -> list[int]:
        if self._free is None:
            buf, base, stride = self._buf, self._base + _IN_USE, self._stride
            self._free = [s for s in range(self._count) if not buf[base + stride * s]]
        return self._free

    # -- the owner -----------------------------------------------------------------------------

    def publish_partition(self, slot: int, epoch: int, log_start_offset: int,
                          high_watermark: int, log_end_offset: int,
                          active_segment_base_offset: int, active_segment_bytes: int,
                          size_bytes: int, index_entries: Iterable[tuple[int, int]] = (),
                          records_in: int = 0, bytes_in: int = 0, *,
                          last_stable_offset: int | None = None, aborted_txns: int = 0) -> None:
        """Publish the log's state after an append or a roll: absolute offsets and sizes, the
        new (offset, position) index entries of the active segment (appended to the ring; a
        new active base offset empties it first), and the records/bytes this append added.
        ``last_stable_offset`` (None: the high watermark, no transaction open) and
        ``aborted_txns`` are the read_committed side (KIP-98).
        ``epoch`` is the slot's epoch when the owner attached (PartitionView.epoch): a slot
        freed and reallocated meanwhile raises FreeSlotError instead of being overwritten.
        Raises TornEntryError if the entry was left mid-update: call rewrite_partition."""
        buf = self._buf
        if not 0 <= slot < self._count:
            raise IndexError(f"partition slot {slot} out of range [0, {self._count})")
        off = self._base + self._stride * slot + PARTITION_DIR_BYTES
        (seq, stored_epoch, total, _s, _h, _e, base, _a, _z,
         records, nbytes, _l, _t) = _LOG_WITH_SEQ.unpack_from(buf, off)  # ours: stable
        if seq & 1:
            raise TornEntryError(f"partition slot {slot} (log part)", off, seq)
        if stored_epoch != epoch:
            raise FreeSlotError(f"partition slot {slot} was reallocated (epoch {stored_epoch}, "
                                f"the caller's {epoch}): stop publishing to it")
        if base != active_segment_base_offset:
            total = 0
        staged: list | tuple = ()
        if index_entries:
            staged = []
            ring, k = off + PARTITION_LOG_HEAD, self._k
            for offset, position in index_entries:
                rel = offset - active_segment_base_offset
                if not (0 <= rel <= U32 and 0 <= position <= U32):
                    raise ValueError(f"index entry ({offset}, {position}) does not fit the "
                                     f"ring of segment {active_segment_base_offset}")
                staged.append((ring + (total % k) * 8, rel, position))
                total += 1
        body = PARTITION_LOG_PUBLISH.pack(
            total, log_start_offset, high_watermark, log_end_offset, active_segment_base_offset,
            active_segment_bytes, size_bytes, records + records_in, nbytes + bytes_in,
            high_watermark if last_stable_offset is None else last_stable_offset, aborted_txns)
        buf[off:off + 8] = _u64(seq + 1)  # seqlock.store, inlined: this runs per append
        for at, rel, position in staged:
            _entry_pack(buf, at, rel, position)
        if _armed:
            seqlock.fire("partition.publish.mid_write")
        buf[off + _PUBLISH_AT:off + PARTITION_LOG_HEAD] = body
        buf[off:off + 8] = _u64(seq + 2)

    def rewrite_partition(self, slot: int, epoch: int, log_start_offset: int,
                          high_watermark: int, log_end_offset: int,
                          active_segment_base_offset: int, active_segment_bytes: int,
                          size_bytes: int, index_entries: Iterable[tuple[int, int]] = (),
                          records_in: int = 0, bytes_in: int = 0, *,
                          last_stable_offset: int | None = None, aborted_txns: int = 0) -> None:
        """The repair path: rewrite the whole log part, torn or not. ``index_entries`` are all
        the active segment's entries, oldest first (the ring keeps the newest K); the counters
        are absolute (a torn entry's counts are lost: pass what the owner knows, or 0).
        ``epoch``: the directory's (a torn log part's own copy is not trusted)."""
        current = self._load_dir(slot)
        if not current.in_use or current.epoch != epoch:
            raise FreeSlotError(f"partition slot {slot} is not in use at epoch {epoch}")
        off = self._offset(slot) + PARTITION_DIR_BYTES
        entries = [(o - active_segment_base_offset, p) for o, p in index_entries]
        if any(not (0 <= rel <= U32 and 0 <= pos <= U32) for rel, pos in entries):
            raise ValueError(f"index entries do not fit segment {active_segment_base_offset}")
        total, k = len(entries), self._k
        body = PARTITION_LOG.pack(
            current.epoch, total, log_start_offset, high_watermark, log_end_offset,
            active_segment_base_offset, active_segment_bytes, size_bytes, records_in, bytes_in,
            high_watermark if last_stable_offset is None else last_stable_offset, aborted_txns)
        odd = seqlock.begin_repair(self._buf, off)
        for n in range(max(0, total - k), total):
            _entry_pack(self._buf, off + PARTITION_LOG_HEAD + (n % k) * 8, *entries[n])
        self._buf[off + SEQ_BYTES:off + PARTITION_LOG_HEAD] = body
        seqlock.end(self._buf, off, odd)

    # -- readers -------------------------------------------------------------------------------

    def slot_info(self, slot: int) -> SlotInfo:
        """The directory part of an in-use slot; its epoch is what an owner passes to
        publish/rewrite (readable even when the log part is torn). Raises FreeSlotError."""
        current = self._load_dir(slot)
        if not current.in_use:
            raise FreeSlotError(f"partition slot {slot} is not in use")
        return SlotInfo(current.topic, current.partition, current.owner, current.epoch)

    def read_partition(self, slot: int) -> PartitionView:
        """A consistent view of the slot. Raises FreeSlotError, or TornEntryError (bounded:
        ``timeout_s``) if the owner died mid-update and has not rewritten it yet."""
        buf = self._buf
        if not 0 <= slot < self._count:
            raise IndexError(f"partition slot {slot} out of range [0, {self._count})")
        off = self._base + self._stride * slot
        log_off = off + PARTITION_DIR_BYTES
        view_struct = self._view_struct
        for _ in range(8):
            current = self._dirs.get(slot)
            if current is None or current.seq != _load(buf, off):
                current = self._load_dir(slot)
            if not current.in_use:
                raise FreeSlotError(f"partition slot {slot} is not in use")
            # the fast path: unpack straight from the shared memory between the two sequence
            # reads (values from a racing write are thrown away: only ints and bytes)
            seq = _load(buf, log_off)
            if not seq & 1:
                fields = view_struct.unpack_from(buf, log_off + SEQ_BYTES)
                if _load(buf, log_off) != seq:
                    fields = self._read_log(slot, current, log_off)
            else:
                fields = self._read_log(slot, current, log_off)
            if fields[0] == current.epoch:
                return _new_tuple(PartitionView, current.prefix + fields)
        raise FreeSlotError(f"partition slot {slot} kept being reallocated while read")

    def log_seq(self, slot: int) -> int:
        """The sequence number of the slot's log part: it moves with every write of its
        owner, so a reader that saw the same number last time can skip reading the part
        (a watch of many partitions for appends, worker.py). One 8-byte load."""
        return _load(self._buf, self._base + self._stride * slot + PARTITION_DIR_BYTES)

    def lookup_position(self, slot: int, offset: int) -> IndexPosition | None:
        """Where to start reading ``offset`` from the hot index ring (see PartitionView)."""
        return self.read_partition(slot).lookup(offset)

    def find(self, topic: str, partition: int) -> int | None:
        """The slot of (topic, partition), or None if it has none."""
        generation = _load(self._buf, GENERATION_OFFSET)
        if generation != self._generation:
            self._rescan(generation)
        return self._slots.get((topic, partition))

    def slots(self) -> dict[tuple[str, int], int]:
        """Every allocated (topic, partition) -> slot, fresh."""
        self.find("", -1)
        return dict(self._slots)

    def owned_by(self, worker: int) -> list[int]:
        """The slots worker ``worker`` owns: what a restarted worker re-attaches to."""
        self.find("", -1)
        return sorted(s for s in self._slots.values() if self._dirs[s].owner == worker)

    def _read_log(self, slot: int, current: _Dir, log_off: int) -> tuple:
        try:
            data = seqlock.read(self._buf, log_off, self._log_size, "partition log part",
                                self.timeout_s)
        except TornEntryError as exc:
            exc.what = f"partition slot {slot} ({current.topic}-{current.partition})"
            raise
        return self._view_struct.unpack(data)

    def _load_dir(self, slot: int) -> _Dir:
        off = self._offset(slot)
        seq, data = seqlock.read_span(self._buf, off, off + SEQ_BYTES,
                                      off + SEQ_BYTES + PARTITION_DIR.size,
                                      f"partition slot {slot} (directory part)", self.timeout_s)
        epoch, in_use, topic_len, partition, owner, topic = PARTITION_DIR.unpack(data)
        name = decode_name(topic, topic_len)
        current = _Dir(seq, epoch, in_use, name, partition, owner, (slot, name, partition, owner))
        self._dirs[slot] = current
        return current

    def _rescan(self, generation: int) -> None:
        """Reload the directory parts whose sequence moved since we cached them (a slot never
        written has sequence 0), then rebuild the lookup dict."""
        buf, base, stride, dirs = self._buf, self._base, self._stride, self._dirs
        for _ in range(16):  # the supervisor allocates between our reads: scan again
            for slot in range(self._count):
                seq = _load(buf, base + stride * slot)
                cached = dirs.get(slot)
                if seq != (0 if cached is None else cached.seq):
                    self._load_dir(slot)
            now = _load(buf, GENERATION_OFFSET)
            if now == generation:
                break
            generation = now
        self._slots = {(d.topic, d.partition): s for s, d in dirs.items() if d.in_use}
        self._generation = generation
