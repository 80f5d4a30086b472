"""The region as the appliance uses it: the calls the supervisor and the workers make, by role.

The supervisor ``create``s it from the config (the name and the geometry follow from it),
records each worker's life cycle, mirrors the controller's partition placement into slots
(``follow``), reads heartbeat ages, and ``unlink``s it on stop. A worker ``attach``es by name
(or uses the mapping it inherited), claims its slot on its first heartbeat, reports SERVING and
STOPPING, and publishes its partitions through ``partitions``. `klog status` uses
``open_status`` (read-only) and ``snapshot``.

The config is duck-typed (``broker_id``, ``log_dirs``, ``first_listener.port``; optional
``shm_max_partitions`` and ``shm_index_entries``) because the shm package imports nothing else
of klog's. Wall-clock milliseconds are what the region stores (`klog status` runs in another
process, so a monotonic clock would not compare).

Deleting a topic frees its slots at once; a lagging former owner that still publishes gets
FreeSlotError from the epoch check instead of writing into a reallocated slot.
"""

from __future__ import annotations

import logging
import os
import time

from .layout import Geometry, WorkerState
from .partition_table import SlotsFullError
from .region import Region, attach_region, create_region, refuse_if_in_use, region_name

log = logging.getLogger(__name__)

DEFAULT_MAX_PARTITIONS = 16384
DEFAULT_INDEX_ENTRIES = 64


def _now_ms() -> int:
    return int(time.time() * 1000)


def region_name_for(config) -> str:
    return region_name(config.broker_id, config.log_dirs[0])


def geometry_for(config) -> Geometry:
    """One worker slot per log dir; partition slots and ring size from the config if set."""
    return Geometry(max_workers=len(config.log_dirs),
                    max_partitions=getattr(config, "shm_max_partitions", DEFAULT_MAX_PARTITIONS),
                    index_entries=getattr(config, "shm_index_entries", DEFAULT_INDEX_ENTRIES))


class ApplianceRegion:
    def __init__(self, region: Region):
        self.region = region
        self.name = region.name
        self.partitions = region.partitions
        self.workers = region.workers
        self.fetch_out = region.fetch_out
        self.metrics = region.metrics
        self._claimed: set[tuple[int, int]] = set()  # (index, pid): survives no fork
        # topic -> the owners its slots were placed for (the supervisor's; only `_place`
        # allocates or frees slots): most topic changes are leadership or ISR changes, which
        # move no replica, and each walked every slot of the table (10,000 in a fleet's
        # failover, once per change)
        self._placed: dict[str, tuple[int, ...]] = {}

    @classmethod
    def create(cls, config) -> ApplianceRegion:
        """The supervisor, at start. Raises RegionInUseError (a live appliance has this
        config) or RegionSpaceError; reclaims a region a killed supervisor left."""
        region = create_region(region_name_for(config), geometry_for(config),
                               broker_id=config.broker_id)
        if region.reclaimed_from_pid:
            log.warning("reclaimed the shared-memory region %s left by pid %d", region.name,
                        region.reclaimed_from_pid)
        for index, log_dir in enumerate(config.log_dirs):
            region.workers.set_worker(index, pid=0, port=config.first_listener.port + index,
                                      state=WorkerState.EMPTY, restarts=0, started_at_ms=0,
                                      log_dir=os.path.abspath(log_dir))
        return cls(region)

    @staticmethod
    def refuse_if_running(config) -> None:
        """The supervisor, before it waits for its log dirs: RegionInUseError at once if a live
        appliance has this config (touches nothing)."""
        refuse_if_in_use(region_name_for(config))

    @classmethod
    def attach(cls, name: str, *, read_only: bool = False) -> ApplianceRegion:
        return cls(attach_region(name, read_only=read_only))

    @classmethod
    def open_status(cls, config) -> ApplianceRegion:
        """Read-only, for `klog status`; RegionNotFoundError when no appliance runs."""
        return cls.attach(region_name_for(config), read_only=True)

    def snapshot(self):
        return self.region.snapshot()

    def close(self) -> None:
        self.region.close()

    def unlink(self) -> None:
        """The supervisor, on stop: nothing stays in /dev/shm."""
        self.region.unlink()
        self.region.close()

    # -- the supervisor --------------------------------------------------------------------------

    def follow(self, decider) -> None:
        """Give every partition of the decider's topics a slot, now and on every change."""
        for info in decider.topics():
            self._place(info.name, info)
        decider.add_listener(self._place)

    def _place(self, name: str, info) -> None:
        if info is not None and self._placed.get(name) == info.owners:
            return
        self._placed.pop(name, None)
        table = self.partitions
        current = {p: s for (t, p), s in table.slots().items() if t == name}
        wanted = {} if info is None else {p: o for p, o in enumerate(info.owners) if o >= 0}
        for partition, slot in current.items():
            if wanted.get(partition) != table.slot_info(slot).owner:
                table.free_partition(slot)
                current[partition] = None
        try:
            for partition, owner in wanted.items():
                if current.get(partition) is None:
                    table.allocate_partition(name, partition, owner)
        except SlotsFullError as exc:
            log.error("topic %s: %s; its partitions are served by their owners only", name, exc)
            return  # placed in part: the next change of the topic tries again
        if info is not None:
            self._placed[name] = info.owners

    def worker_starting(self, index: int, *, restarts: int) -> None:
        self.workers.update_worker(index, state=WorkerState.STARTING, restarts=restarts)

    def worker_forked(self, index: int, pid: int) -> None:
        self.workers.update_worker(index, pid=pid, started_at_ms=_now_ms())

    def worker_exited(self, index: int, *, failed: bool) -> None:
        self.workers.update_worker(index,
                                   state=WorkerState.FAILED if failed else WorkerState.DEAD)

    def heartbeat_age_s(self, index: int) -> float:
        return self.workers.read_worker(index).heartbeat_age_ms(_now_ms()) / 1000

    # -- a worker --------------------------------------------------------------------------------

    def _claim(self, index: int) -> None:
        key = (index, os.getpid())
        if key not in self._claimed:
            self.workers.claim_worker(index, pid=key[1], now_ms=_now_ms())
            self._claimed.add(key)

    def heartbeat(self, index: int) -> None:
        self._claim(index)
        self.workers.heartbeat(index, _now_ms())

    def worker_serving(self, index: int) -> None:
        self._claim(index)
        self.workers.report_state(index, WorkerState.SERVING, _now_ms())

    def worker_stopping(self, index: int) -> None:
        self._claim(index)
        self.workers.report_state(index, WorkerState.STOPPING, _now_ms())

    # -- any process -----------------------------------------------------------------------------

    def worker_serving_now(self, index: int) -> bool:
        """Whether worker ``index`` reported SERVING (a Metadata answer lists only those)."""
        return self.workers.read_worker(index).state == WorkerState.SERVING
