"""The supervisor's link to the fleet: `cluster.ClusterMember` in the appliance's terms.

It turns the appliance's config into a membership (node ids by `node_id_for`, the advertised
address, `broker.rack`), the fleet's snapshot into the `FleetView` that `FleetRelay`
follows, and admin requests into `TopicResult`s after the checks every controller makes.
Producer ids come from fleet-wide blocks, so two appliances never hand out the same one.
The fleet's SCRAM users and ACLs live in ZooKeeper (`cluster.security_store`): this is the
supervisor's way to them (`users`, `alter`, `acl_rows`, `update_acls`, `security_generation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from appliance.config import BrokerConfig
from appliance.control.channel import AlterPartition
from appliance.control.fleet import FleetTopic, FleetView
from appliance.control.topics import (
    INTERNAL_PREFIX,
    FleetNode,
    PartitionLeadership,
    TopicInfo,
    TopicResult,
    check_new_configs,
    check_new_topic,
    check_partition_increase,
    topic_log_config,
)
from appliance.identity import node_id_for
from appliance.scram_credentials import ScramChange, apply_changes
from cluster import admin_requests, shutdown
from cluster.config_store import FleetConfigStore
from cluster.leadership import LeadershipConfig
from cluster.member import ClusterMember
from cluster.security_store import SecurityStore
from cluster.session import CONNECTED, NotAuthorized, RegistrationConflict, ZooKeeperUnavailable
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

RECONNECT_WAIT_S = 3.0  # an admin request waits this long for a suspended session to return
# an ISR change waits less: the supervisor's loop waits with it (the leader asks again later)
ISR_WAIT_S = 0.5


class FleetUnavailableError(RuntimeError):
    """The fleet cannot be joined now (ZooKeeper unreachable at start)."""


class FleetMembership:
    def __init__(self, config: BrokerConfig, *, wake: Callable[[], None]):
        self.config = config
        self.member = ClusterMember(
            config.zookeeper_connect, broker_id=config.broker_id, host=config.advertised.host,
            rack=config.broker_rack, session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            leadership=leadership_config(config), on_change=wake,
            digest_credentials=config.zookeeper_digest_credentials,
            set_acl=config.zookeeper_set_acl)
        self.security = SecurityStore(self.member.session, on_change=wake)
        # the dynamic configs of brokers, clients and users (appliance.control.dynamic_configs)
        self.configs = FleetConfigStore(self.member.session, on_change=wake)
        self._producer_ids = iter(())
        self._viewed: tuple[object, FleetView | None] = (None, None)  # (snapshot, its view)
        self._views = ViewBuilder()

    def start(self) -> None:
        """Join the fleet, and take a block of producer ids at once: idempotent producers
        can then start here even while ZooKeeper is unreachable later."""
        try:
            self.member.start()
            self.security.start()
            self.configs.start()
            self._producer_ids = iter(self.member.allocate_producer_ids())
        except (ZooKeeperUnavailable, NotAuthorized) as exc:
            raise FleetUnavailableError(f"zookeeper.connect: {exc}") from None

    def stop(self) -> None:
        self.configs.stop()
        self.security.stop()
        self.member.stop()

    # SCRAM users and ACLs (in ZooKeeper) ----------------------------------------------------

    @property
    def security_generation(self) -> int:
        """Bumped by each change of the users or ACLs seen in ZooKeeper."""
        return self.security.generation

    def users(self) -> dict:
        return self.security.users()

    def alter(self, changes: list[ScramChange]) -> None:
        """AlterUserScramCredentials in a fleet. Raises ZooKeeperUnavailable, NotAuthorized
        (OSErrors)."""
        self._connected_or_raise()
        for name in dict.fromkeys(c.user for c in changes):
            mine = [c for c in changes if c.user == name]
            self.security.update_user(name, lambda current, m=mine: apply_changes(current, m))

    def acl_rows(self):
        return self.security.acls()

    def update_acls(self, resource: tuple[str, str, str], change) -> None:
        self._connected_or_raise()
        self.security.update_acls(resource, change)

    def _connected_or_raise(self) -> None:
        """Fail soon, as `_unreachable`: the supervisor's loop waits for this write."""
        if not self.member.wait_connected(RECONNECT_WAIT_S):
            raise ZooKeeperUnavailable(f"ZooKeeper is unreachable (session "
                                       f"{self.member.state}); retry when it is back")

    @property
    def cluster_id(self) -> str:
        return self.member.cluster_id

    def register_node(self, index: int) -> None:
        try:
            self.member.register_node(node_id_for(self.config.broker_id, index),
                                      self.config.advertised.port + index,
                                      node_endpoints(self.config, index))
        except ZooKeeperUnavailable as exc:
            log.error("worker %d serves but cannot join the fleet yet: %s", index, exc)

    def unregister_node(self, index: int) -> None:
        self.member.unregister_node(node_id_for(self.config.broker_id, index))

    @property
    def node_ids(self) -> set[int]:
        return {node_id_for(self.config.broker_id, i) for i in range(len(self.config.log_dirs))}

    def request_controlled_shutdown(self) -> bool:
        """Ask the controller to move leadership away from this appliance's nodes; False if
        ZooKeeper cannot take the request now (the appliance then stops as it would alone)."""
        if not self.member.wait_connected(RECONNECT_WAIT_S):
            log.warning("controlled shutdown: ZooKeeper is unreachable (session %s)",
                        self.member.state)
            return False
        try:
            self.member.request_controlled_shutdown()
        except (ZooKeeperUnavailable, RegistrationConflict) as exc:
            log.warning("controlled shutdown: cannot ask the controller: %s", exc)
            return False
        return True

    def shutdown_pending(self) -> list[str]:
        """Partitions the controller still has to change for this appliance to leave."""
        return shutdown.pending(self.member.snapshot(), self.node_ids)

    def leading(self) -> list[str]:
        """Partitions this appliance's nodes lead, as the fleet's snapshot has it."""
        return shutdown.leading(self.member.snapshot(), self.node_ids)

    def view(self) -> FleetView:
        """The fleet in the appliance's terms; built once per snapshot (the member replaces
        its snapshot only when something changed), since the supervisor asks at every turn
        of its loop and building it is linear in the partitions: with 10,000 of them, each
        worker message cost a rebuild (issue 26)."""
        snapshot = self.member.snapshot()
        seen, view = self._viewed
        if snapshot is seen:
            return view
        view = self._views.build(snapshot)
        self._viewed = (snapshot, view)
        return view

    def metrics_facts(self) -> dict[str, int]:
        """What the metrics say of the fleet (`appliance.metrics.collector`); any thread."""
        view = self.view()
        offline = sum(1 for topic in view.topics.values() for p in topic.leadership
                      if p.leader not in view.nodes)
        return {"klog_zookeeper_connected": int(self.member.state == CONNECTED),
                "klog_controller_active": int(self.member.is_controller),
                "klog_controller_epoch": self.member.snapshot().controller_epoch,
                "klog_offline_partitions": offline}

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str], *, validate_only: bool) -> TopicResult:
        refused = check_new_topic(name, partitions, configs, self.config.log_defaults)
        if refused is not None:
            return refused
        min_insync = topic_log_config(self.config.log_defaults, configs).min_insync_replicas
        if replication_factor < min_insync and not name.startswith(INTERNAL_PREFIX):
            return TopicResult(name, ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"replication factor {replication_factor} is below "
                               f"min.insync.replicas={min_insync}: no acks=all write could "
                               f"ever be accepted")
        unreachable = self._unreachable(name)
        if unreachable is not None:
            return unreachable
        result = self.member.create_topic(name, partitions, replication_factor, configs,
                                          validate_only=validate_only)
        return TopicResult(name, result.error, result.message)

    def _unreachable(self, name: str) -> TopicResult | None:
        """Fail soon while the session is not connected: the worker that asked waits for
        this answer, and its clients' produce and fetch must not wait with it. Soon, not at
        once: losing one server of the ensemble only moves the session to another
        (SUSPENDED for moments), which must not fail an admin request."""
        if self.member.wait_connected(RECONNECT_WAIT_S):
            return None
        return TopicResult(name, ErrorCode.REQUEST_TIMED_OUT,
                           f"ZooKeeper is unreachable (session {self.member.state}); "
                           f"retry when it is back")

    def create_partitions(self, name: str, info: TopicInfo | None, count: int, *,
                          validate_only: bool) -> TopicResult:
        """`info` is the topic as this appliance last saw it: a first check, before the
        fleet's own (the assignment is re-read, and written only if unchanged meanwhile)."""
        refused = check_partition_increase(name, info, count)
        if refused is not None:
            return refused
        unreachable = self._unreachable(name)
        if unreachable is not None:
            return unreachable
        result = self.member.create_partitions(name, count, validate_only=validate_only)
        return TopicResult(name, result.error, result.message)

    def alter_topic_configs(self, name: str, info: TopicInfo | None, configs: dict[str, str],
                            *, validate_only: bool) -> TopicResult:
        """`info` as this appliance last saw it: a first check (the fleet's own: the topic
        must still exist when the configs are written)."""
        refused = check_new_configs(name, info, configs, self.config.log_defaults)
        if refused is not None or validate_only:
            return refused or TopicResult(name)
        unreachable = self._unreachable(name)
        if unreachable is not None:
            return unreachable
        result = self.member.alter_topic_configs(name, configs)
        return TopicResult(name, result.error, result.message)

    def delete_topic(self, name: str) -> TopicResult:
        unreachable = self._unreachable(name)
        if unreachable is not None:
            return unreachable
        result = self.member.delete_topic(name)
        return TopicResult(name, result.error, result.message)

    def alter_partitions(self, asks: list[tuple[AlterPartition, int]]) -> list[ErrorCode]:
        """Local leaders' ISR changes, each (request, its node id), together: one pipelined
        read and one multi for a burst of them (cluster/isr.py)."""
        if not self.member.wait_connected(ISR_WAIT_S):
            return [ErrorCode.REQUEST_TIMED_OUT] * len(asks)
        try:
            errors = self.member.alter_partitions([
                (r.topic, r.partition, r.leader_epoch, r.isr, leader) for r, leader in asks])
        except ZooKeeperUnavailable as exc:
            log.warning("ISR of %d partition(s) not changed: %s", len(asks), exc)
            return [ErrorCode.REQUEST_TIMED_OUT] * len(asks)
        return errors  # the member woke its pass: the supervisor follows the new states

    def cluster_admin(self, op: str, args: str) -> tuple[ErrorCode, str | None]:
        """A fleet admin request relayed by a worker (cluster/admin_requests.py)."""
        if not self.member.wait_connected(RECONNECT_WAIT_S):
            return (ErrorCode.REQUEST_TIMED_OUT,
                    f"ZooKeeper is unreachable (session {self.member.state}); retry")
        try:
            return admin_requests.serve(self.member, op, args)
        except Exception as exc:  # the supervisor's loop must go on serving its workers
            log.exception("fleet admin request %s failed", op)
            return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"

    def allocate_producer_id(self) -> int:
        """The next id of this appliance's fleet-wide block; -1 while ZooKeeper cannot be
        reached for a new block (InitProducerId answers a retriable error then)."""
        for producer_id in self._producer_ids:
            return producer_id
        if self.member.state != CONNECTED:
            return -1
        try:
            self._producer_ids = iter(self.member.allocate_producer_ids())
        except ZooKeeperUnavailable as exc:
            log.warning("no producer id block: %s", exc)
            return -1
        return next(self._producer_ids)


def node_endpoints(config: BrokerConfig, index: int) -> tuple[tuple[str, str, str, int], ...]:
    """Where worker `index` is reached on each listener, as its `/brokers/ids` znode says."""
    return tuple((a.name, a.security_protocol, a.host, a.port + index)
                 for a in config.advertised_endpoints)


def leadership_config(config: BrokerConfig) -> LeadershipConfig:
    """What the controller of the fleet, if this appliance becomes it, decides by."""
    return LeadershipConfig(
        unclean_leader_election_enable=config.log_defaults.unclean_leader_election_enable,
        auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage)


class ViewBuilder:
    """Builds a snapshot's `FleetView`, reusing the `FleetTopic` of every topic that did not
    change: a topic whose `TopicState` is the object of the last build (`apply_changes`
    keeps the topics a note does not touch), or whose fresh read (a fleet pass) comes out
    equal. `FleetRelay.refresh` then skips the same objects, so a controller's note of 200
    states costs the topics it names, not all of them (20 topics of 500 partitions: 15 ms
    a note before, 1 ms now; a failover brings 50 such notes to a supervisor that is busy
    already).

    Not thread-safe as a cache, and need not be: two threads building at once each get a
    right view, and at worst one rebuilds what the other kept."""

    def __init__(self):
        self._kept: dict[str, tuple[object, FleetTopic]] = {}  # topic -> (state, FleetTopic)

    def build(self, snapshot) -> FleetView:
        nodes = {node_id: FleetNode(node_id, b.host, b.port, b.rack,
                                    tuple((name, host, port)
                                          for name, _, host, port in b.endpoints))
                 for node_id, b in snapshot.brokers.items()}
        topics = {}
        kept, built = self._kept, {}
        for name, topic in snapshot.topics.items():
            if name in snapshot.deleting:
                continue
            held = kept.get(name)
            if held is not None and held[0] is topic:
                topics[name] = held[1]
                built[name] = held
                continue
            fleet_topic = None if held is None else _noted_topic(name, topic, *held)
            if fleet_topic is None:
                fleet_topic = _fleet_topic(name, topic)
                if held is not None and held[1] == fleet_topic:
                    fleet_topic = held[1]
            topics[name] = fleet_topic
            built[name] = (topic, fleet_topic)
        self._kept = built
        return FleetView(nodes, topics, snapshot.controller,
                         {n: dict(c) for n, c in snapshot.broker_configs.items()})


def _noted_topic(name: str, topic, old, old_view: FleetTopic) -> FleetTopic | None:
    """The FleetTopic of `topic` made from `old_view` (that of `old`) when `topic` is `old`
    with some states replaced, as a note makes it (`apply_changes`: the same replicas and
    config, each unchanged state the same object): only those partitions are built anew,
    and the others keep their PartitionLeadership objects, which then compare by identity
    downstream (the relay, the control server). None: build it whole."""
    if topic.replicas is not old.replicas or topic.config is not old.config or \
            len(old_view.leadership) != len(topic.replicas):
        return None
    old_states = old.states
    changed = [p for p, state in topic.states.items() if old_states.get(p) is not state]
    if len(old_states) != len(topic.states) or any(p >= len(old_view.leadership)
                                                   for p in changed):
        return None
    if not changed:
        return old_view
    leadership = list(old_view.leadership)
    for partition in changed:
        state = topic.states[partition][0]
        leadership[partition] = PartitionLeadership(state.leader, state.leader_epoch,
                                                    topic.replicas[partition], state.isr)
    return FleetTopic(name, tuple(leadership), old_view.configs)


def _fleet_topic(name: str, topic) -> FleetTopic:
    leadership = []
    for partition in sorted(topic.replicas):
        replicas = topic.replicas[partition]
        state = topic.states.get(partition)
        if state is None:  # the controller has not elected its first leader yet
            leadership.append(PartitionLeadership(-1, -1, replicas, ()))
        else:
            leadership.append(PartitionLeadership(state[0].leader, state[0].leader_epoch,
                                                  replicas, state[0].isr))
    return FleetTopic(name, tuple(leadership), dict(topic.config))
