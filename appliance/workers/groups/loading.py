"""Which partitions of ``__consumer_offsets`` a coordinator serves: it follows leadership.

`PartitionLoads.follow` is level-triggered (the worker calls it after every change of the
internal topic's roles, and the coordinator's sweep on every tick): it serves exactly the
partitions this worker leads now (``coordination.coordinator_epoch``):

- a partition it starts leading is loaded from its log (``offsets_log.replay``, from the log
  start to the log end). An appliance alone loads at once, before the worker serves, as it
  always did; in cluster mode a task reads between yields to the loop (a partition of a large
  log must not stall the worker's other partitions) and the partition answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile. A load whose leadership moves on is dropped.
- a partition it stops leading is unloaded at once, in the same step as the replication role
  became a follower's, before the replica fetcher can truncate its log (KIP-101): its groups
  are dropped, and members waiting in a join or sync are answered NOT_COORDINATOR, so they
  look for the new coordinator. Only a leader holds groups, so a truncation never touches
  loaded state, and a leader never truncates.
- a partition still led after a new leader epoch keeps its state: a worker that stopped
  leading in between was told so (the controller elects only from the ISR, which it left).

Event loop only.
"""

from __future__ import annotations

import asyncio
import logging

from appliance.segments.errors import OffsetOutOfRangeError, StorageError
from appliance.workers.groups.coordination import ALONE
from appliance.workers.groups.offsets_log import OFFSETS_TOPIC, LoadedPartition, replay

log = logging.getLogger(__name__)

RETRY_S = 1.0  # a load that failed is tried again by a sweep after this


class PartitionLoads:
    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.worker = coordinator.worker
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch it is served in
        self.loading: dict[int, tuple[int, asyncio.Future]] = {}  # partition -> (epoch, task)
        self.running = False  # cluster mode's loads are tasks: only once the loop runs

    def follow(self) -> None:
        """Serve exactly the partitions this worker leads now (see the module docstring)."""
        info = self.worker.control.topic(OFFSETS_TOPIC)
        wanted = {} if info is None else {
            p: epoch for p in range(info.partition_count)
            if (epoch := self.coordinator.epoch_of(info, p)) is not None}
        for partition in [p for p in self.loaded if p not in wanted]:
            self.unload(partition)
        for partition, (epoch, _) in list(self.loading.items()):
            if wanted.get(partition) != epoch:
                self.unload(partition)
        for partition, epoch in wanted.items():
            if partition in self.loaded:
                self.loaded[partition] = epoch
            elif partition not in self.loading:
                self._load(partition, epoch)

    def _load(self, partition: int, epoch: int) -> None:
        plog = self.worker.partitions.get(OFFSETS_TOPIC, partition).log
        if epoch == ALONE:
            state = LoadedPartition()
            for _ in replay(plog, state):
                pass
            self._loaded(partition, epoch, plog, state)
        elif self.running:
            task = asyncio.ensure_future(self._load_in_steps(partition, epoch, plog))
            self.loading[partition] = (epoch, task)

    async def _load_in_steps(self, partition: int, epoch: int, plog) -> None:
        state = LoadedPartition()
        try:
            for _ in replay(plog, state):
                await asyncio.sleep(0)
        except (StorageError, OffsetOutOfRangeError) as exc:
            log.error("worker %d cannot load %s-%d: %s", self.worker.index, OFFSETS_TOPIC,
                      partition, exc)
            await asyncio.sleep(RETRY_S)
            if self.loading.get(partition, (None,))[0] == epoch:
                del self.loading[partition]
            return
        if self.loading.get(partition, (None,))[0] == epoch:
            del self.loading[partition]
            self._loaded(partition, epoch, plog, state)

    def _loaded(self, partition: int, epoch: int, plog, state: LoadedPartition) -> None:
        groups = self.coordinator.install(partition, plog, state)
        self.loaded[partition] = epoch
        log.info("worker %d loaded %s-%d: %d group(s) from %d record(s)%s", self.worker.index,
                 OFFSETS_TOPIC, partition, groups, state.records,
                 "" if epoch == ALONE else f", leader epoch {epoch}")

    def unload(self, partition: int) -> None:
        """Stop serving the partition (another node leads it now, or the topic is gone)."""
        loading = self.loading.pop(partition, None)
        if loading is not None:
            loading[1].cancel()
        if self.loaded.pop(partition, None) is not None:
            groups = self.coordinator.drop(partition)
            log.info("worker %d unloaded %s-%d: %d group(s)", self.worker.index, OFFSETS_TOPIC,
                     partition, groups)

    def stop(self) -> None:
        self.running = False
        for _, task in self.loading.values():
            task.cancel()
        self.loading.clear()
