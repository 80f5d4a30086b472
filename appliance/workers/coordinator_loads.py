"""Which partitions of an internal topic a coordinator serves: exactly those it leads.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) hold in memory what the partitions they lead hold in their logs.
Following that leadership is one mechanism for both, kept here so that a fix to it is made
once; what a partition's state is, how its log rebuilds it and what serving it means stay
with each coordinator (the topic, a state factory, the replay function, install/uninstall).

`PartitionLoads.follow` is level-triggered (the worker calls it after every change of the
internal topic's roles, and the coordinator's sweep on every tick): it serves exactly the
partitions this worker leads now (``groups.coordination.coordinator_epoch``):

- a partition it starts leading is loaded from its log (the replay function, from the log
  start to the log end). An appliance alone loads at once, before the worker serves, as it
  always did; in cluster mode a task reads between yields to the loop (a partition of a large
  log must not stall the worker's other partitions) and the partition answers
  COORDINATOR_LOAD_IN_PROGRESS meanwhile. A load whose leadership moves on is dropped: the
  leader epoch is checked again when the task ends.
- a partition it stops leading is unloaded at once, in the same step as the replication role
  became a follower's, before the replica fetcher can truncate its log (KIP-101): the
  coordinator drops its state (the group coordinator answers members waiting in a join or
  sync NOT_COORDINATOR, so they look for the new coordinator). Only a leader holds state, so
  a truncation never touches loaded state, and a leader never truncates.
- a partition still led after a new leader epoch keeps its state: a worker that stopped
  leading in between was told so (the controller elects only from the ISR, which it left).

Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

from appliance.segments.errors import OffsetOutOfRangeError, StorageError
from appliance.workers.groups.coordination import ALONE

log = logging.getLogger(__name__)

RETRY_S = 1.0  # a load that failed is tried again by a sweep after this


class PartitionLoads:
    """The partitions of ``topic`` served here (``loaded``) and those being loaded.

    ``epoch_of(info, partition)``: the leader epoch in which this worker leads the partition
    now, or None. ``new_state()``: an empty state; ``replay(plog, state)`` applies the log to
    it, yielding between reads (raises StorageError, OffsetOutOfRangeError).
    ``install(partition, epoch, plog, state)``: serve what the log rebuilt (and say so);
    ``uninstall(partition)``: forget a partition that was served.
    """

    def __init__(self, worker, topic: str, *, epoch_of: Callable[[Any, int], int | None],
                 new_state: Callable[[], Any], replay: Callable[[Any, Any], Iterator[None]],
                 install: Callable[[int, int, Any, Any], None],
                 uninstall: Callable[[int], None]):
        self.worker = worker
        self.topic = topic
        self._epoch_of = epoch_of
        self._new_state = new_state
        self._replay = replay
        self._install = install
        self._uninstall = uninstall
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch it is served in
        self.loading: dict[int, tuple[int, asyncio.Future]] = {}  # partition -> (epoch, task)
        self.running = False  # cluster mode's loads are tasks: only once the loop runs

    def follow(self) -> None:
        """Serve exactly the partitions this worker leads now (see the module docstring)."""
        info = self.worker.control.topic(self.topic)
        wanted = {} if info is None else {
            p: epoch for p in range(info.partition_count)
            if (epoch := self._epoch_of(info, p)) is not None}
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
        plog = self.worker.partitions.get(self.topic, partition).log
        if epoch == ALONE:
            state = self._new_state()
            for _ in self._replay(plog, state):
                pass
            self._loaded(partition, epoch, plog, state)
        elif self.running:
            task = asyncio.ensure_future(self._load_in_steps(partition, epoch, plog))
            self.loading[partition] = (epoch, task)

    async def _load_in_steps(self, partition: int, epoch: int, plog) -> None:
        state = self._new_state()
        try:
            for _ in self._replay(plog, state):
                await asyncio.sleep(0)
        except (StorageError, OffsetOutOfRangeError) as exc:
            log.error("worker %d cannot load %s-%d: %s", self.worker.index, self.topic,
                      partition, exc)
            await asyncio.sleep(RETRY_S)
            if self.loading.get(partition, (None,))[0] == epoch:
                del self.loading[partition]
            return
        if self.loading.get(partition, (None,))[0] == epoch:
            del self.loading[partition]
            self._loaded(partition, epoch, plog, state)

    def _loaded(self, partition: int, epoch: int, plog, state) -> None:
        self._install(partition, epoch, plog, state)
        self.loaded[partition] = epoch

    def unload(self, partition: int) -> None:
        """Stop serving the partition (another node leads it now, or the topic is gone)."""
        loading = self.loading.pop(partition, None)
        if loading is not None:
            loading[1].cancel()
        if self.loaded.pop(partition, None) is not None:
            self._uninstall(partition)

    def unload_all(self) -> None:
        for partition in list(self.loaded) + list(self.loading):
            self.unload(partition)

    def stop(self) -> None:
        self.running = False
        for _, task in self.loading.values():
            task.cancel()
        self.loading.clear()
