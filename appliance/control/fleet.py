"""Topic decisions in cluster mode: the fleet controller's, relayed through ZooKeeper.

`FleetRelay` stands where `LocalDecider` stands when the appliance runs alone, so the control
server, the shm region and the workers see one interface either way. It relays and follows, it
does not decide: topic creation, deletion and producer ids go to the fleet (`cluster/`: any
member writes the request, the elected controller places and elects), and what the fleet decided
comes back as a `FleetView`, which this module turns into the appliance's terms:
`TopicInfo.owners[p]` is the local worker holding a replica of p (or -1), `leadership` the
controller's partition states, and the live nodes go to the workers as a `fleet` broadcast.

Thread rule: `refresh` runs on the supervisor's loop only (kazoo's callbacks just wake it).

ISRs that only grew are told together. A restarted broker rejoins the ISR of every partition
it holds within seconds, one ZooKeeper write per partition, and each write changed its topic:
each worker of every appliance was sent the whole topic again and applied it whole, so a
topic of P partitions cost each worker P decodes and applies of P partitions. With 300
partitions that was half of every worker's CPU for about six seconds, and a follower catching
up meanwhile copied at 0.1 GB/s, against 1.4-2.0 in a fleet without those partitions
(`perf/bench_replication.py --idle-partitions 300`; with this and the ISR writes batched,
`cluster/isr.py`, 0.7-1.3 GB/s). Now a change that only adds replicas to ISRs (same leaders, epochs,
replicas, owners and configs as the workers were last told) is told at once when the topic was
last told `ISR_GROWTH_COALESCE_S` ago or more, else with the others at the end of that window
(`next_due` tells the supervisor's loop when). Every other change, a shrinking ISR among them,
is told at once, as before. Nothing waits on an ISR growth being told: the leader that asked
for it has it from its reply (`Partition.isr_written`), and a Metadata answer may show the
ISR up to a window late (Kafka's brokers batched these for seconds: its ISR change
notifications).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from appliance.control.channel import AlterPartition
from appliance.control.interface import FleetListener, TopicListener
from appliance.control.topics import (
    INTERNAL_PREFIX,
    FleetNode,
    PartitionLeadership,
    TopicInfo,
    TopicResult,
    check_changeable,
)
from appliance.identity import NODES_PER_APPLIANCE
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

ISR_GROWTH_COALESCE_S = 0.2  # a topic whose ISRs only grew is told at most this often


@dataclass(frozen=True)
class FleetTopic:
    name: str
    leadership: tuple[PartitionLeadership, ...]
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetView:
    """What the fleet looks like from ZooKeeper at one moment."""

    nodes: dict[int, FleetNode]
    topics: dict[str, FleetTopic]
    controller_id: int = -1  # the controlling appliance's broker.id, -1: none elected
    # the nodes' dynamic configs (/config/brokers/<node>): replication throttle rates
    node_configs: dict[int, dict[str, str]] = field(default_factory=dict)


def local_owners(leadership: tuple[PartitionLeadership, ...], broker_id: int) -> tuple[int, ...]:
    """Per partition, the index of this appliance's worker holding a replica, or -1."""
    owners = []
    for state in leadership:
        mine = [r % NODES_PER_APPLIANCE for r in state.replicas
                if r // NODES_PER_APPLIANCE == broker_id]
        owners.append(mine[0] if mine else -1)
    return tuple(owners)


def isr_only_grew(told: TopicInfo, now: TopicInfo) -> bool:
    """Whether every difference from `told` to `now` is replicas added to ISRs: the same
    owners, configs, leaders, leader epochs and replicas, each ISR a superset of its own."""
    if (told.owners != now.owners or told.configs != now.configs
            or told.internal != now.internal or told.leadership is None
            or now.leadership is None or len(told.leadership) != len(now.leadership)):
        return False
    for before, after in zip(told.leadership, now.leadership, strict=True):
        if before is after or before == after:
            continue
        if (before.leader != after.leader or before.leader_epoch != after.leader_epoch
                or before.replicas != after.replicas
                or not set(before.isr) <= set(after.isr)):
            return False
    return True


class FleetRelay:
    """Relays topic requests to the fleet and follows its decisions, with LocalDecider's
    interface.

    `fleet` is the cluster membership (`cluster.member.ClusterMember`'s adapter): it does the
    ZooKeeper work and raises nothing; failures come back as a `TopicResult` with a Kafka
    error code (REQUEST_TIMED_OUT while ZooKeeper cannot be reached)."""

    def __init__(self, fleet, *, broker_id: int, defaults: LogConfig, default_partitions: int,
                 default_replication_factor: int, clock=time.monotonic):
        self.fleet = fleet
        self._clock = clock
        self.broker_id = broker_id
        self.defaults = defaults
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self._topics: dict[str, TopicInfo] = {}
        self._nodes: dict[int, FleetNode] | None = None  # None: no view yet
        self.controller_node_id = -1
        self.node_configs: dict[int, dict[str, str]] = {}
        self._refreshed: FleetView | None = None  # the view the listeners were told of
        self._told_at: dict[str, float] = {}  # topic -> when the listeners last heard of it
        # topic -> (the FleetTopic, the TopicInfo made of it) of the last refresh: a topic
        # the view did not change (the same FleetTopic) is not made and compared again, so
        # a refresh costs the topics that changed, not all of them (with 10,000 partitions,
        # 15 ms per refresh, and a failover's notes bring one each)
        self._made: dict[str, tuple[FleetTopic, TopicInfo]] = {}
        self._due: float | None = None  # when a held-back ISR growth must be told
        self._listeners: list[TopicListener] = []
        self._fleet_listeners: list[FleetListener] = []

    # LocalDecider's interface -------------------------------------------------------

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def add_fleet_listener(self, listener: FleetListener) -> None:
        """`listener(nodes, controller_node_id)` runs at once, on the fleet as seen so far,
        then when live nodes, the controller or the nodes' dynamic configs (`node_configs`)
        change."""
        self._fleet_listeners.append(listener)
        listener(self.nodes, self.controller_node_id)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    @property
    def nodes(self) -> dict[int, FleetNode]:
        return dict(self._nodes or {})

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None, *,
                     validate_only: bool = False) -> TopicResult:
        result = self.fleet.create_topic(
            name, self.default_partitions if partitions == -1 else partitions,
            self.default_replication_factor if replication_factor == -1 else replication_factor,
            dict(configs or {}), validate_only=validate_only)
        self.refresh()  # the asking worker must see the topic before the reply
        return result

    def delete_topic(self, name: str) -> TopicResult:
        info = self._topics.get(name)
        if info is not None:  # an unknown one is the fleet's to refuse: it may be newer
            refused = check_changeable(name, info, "it cannot be deleted")
            if refused is not None:
                return refused
        result = self.fleet.delete_topic(name)
        self.refresh()
        return result

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> TopicResult:
        result = self.fleet.create_partitions(name, self._topics.get(name), count,
                                              validate_only=validate_only)
        self.refresh()
        return result

    def alter_topic_configs(self, name: str, configs: dict[str, str], *,
                            validate_only: bool = False) -> TopicResult:
        """Replace the topic's overrides in /config/topics/<t>; every appliance hears of it
        through its view (the asking one before the reply)."""
        result = self.fleet.alter_topic_configs(name, self._topics.get(name), dict(configs),
                                                validate_only=validate_only)
        self.refresh()
        return result

    def allocate_producer_id(self) -> int:
        return self.fleet.allocate_producer_id()

    def cluster_admin(self, op: str, args: str) -> tuple[ErrorCode, str | None]:
        """A fleet admin request (`cluster/admin_requests.py`); the asking worker sees what it
        changed before the answer."""
        answer = self.fleet.cluster_admin(op, args)
        self.refresh()
        return answer

    def alter_partitions(self, asks: list[tuple[AlterPartition, int]]) -> list[ErrorCode]:
        """A local leader's ISR changes, each (request, its node id), together: one
        pipelined read and one multi (cluster/isr.py); the workers hear of the new states
        with the fleet's next snapshot."""
        errors = self.fleet.alter_partitions(asks)
        self.refresh()
        return errors

    # following the fleet -------------------------------------------------------------------

    def refresh(self) -> None:
        """Apply the fleet's current view: tell listeners what changed, in the appliance's
        terms (ISR growth may be held back a moment: the module docstring). Cheap when
        nothing changed (one snapshot, dict comparisons)."""
        view: FleetView = self.fleet.view()
        now = self._clock()
        if view is self._refreshed and (self._due is None or now < self._due):
            return  # the same view as last time, and nothing held back is due
        self._refreshed = view
        nodes = dict(view.nodes)  # each with its registered rack (broker.rack, or None)
        controller = (view.controller_id * NODES_PER_APPLIANCE
                      if view.controller_id >= 0 else -1)
        if (nodes != self._nodes or controller != self.controller_node_id
                or view.node_configs != self.node_configs):
            self._nodes, self.controller_node_id = nodes, controller
            self.node_configs = view.node_configs
            for listener in self._fleet_listeners:
                try:
                    listener(nodes, controller)
                except Exception:  # as for topic listeners: the others must still hear
                    log.exception("fleet listener failed")
        wanted = {}
        made = {}
        for name, topic in view.topics.items():
            held = self._made.get(name)
            if held is not None and held[0] is topic:
                made[name] = held
                wanted[name] = held[1]
                continue
            info = TopicInfo(name=name, owners=local_owners(topic.leadership, self.broker_id),
                             configs=topic.configs, internal=name.startswith(INTERNAL_PREFIX),
                             leadership=topic.leadership)
            made[name] = (topic, info)
            wanted[name] = info
        self._made = made
        for name in [n for n in self._topics if n not in wanted]:
            del self._topics[name]
            self._told_at.pop(name, None)
            self._tell(name, None)
        self._due = None
        for name, info in wanted.items():
            told = self._topics.get(name)
            if told is info or told == info:
                continue
            if told is not None and isr_only_grew(told, info):
                quiet_until = self._told_at.get(name, now) + ISR_GROWTH_COALESCE_S
                if name in self._told_at and now < quiet_until:
                    self._due = quiet_until if self._due is None else min(self._due,
                                                                         quiet_until)
                    continue
            self._topics[name] = info
            self._told_at[name] = now
            self._tell(name, info)

    def next_due(self) -> float | None:
        """The time (of the clock, `time.monotonic` unless given) by which `refresh` must run
        again to tell an ISR growth it held back, or None."""
        return self._due

    def _tell(self, name: str, info: TopicInfo | None) -> None:
        for listener in self._listeners:
            try:
                listener(name, info)
            except Exception:  # one listener's bug must not stop the others hearing
                log.exception("listener failed on topic %s", name)
