"""The fleet as ZooKeeper holds it, read in one pass: live nodes, appliances, topics with their
assignments, partition states and configs, the controller and its epoch, pending deletions.

Every read arms a watch (`watch`), so any change anywhere re-runs the reader's owner; the
owner re-reads everything (level-triggered, like a reconcile loop), which stays cheap for a
fleet of a few appliances and a few hundred partitions, and can never miss an edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster import znodes
from cluster.session import NoNodeError, Session


@dataclass(frozen=True)
class TopicState:
    name: str
    replicas: dict[int, tuple[int, ...]]
    version: int  # of the assignment node, for conditional partition additions
    states: dict[int, tuple[znodes.PartitionState, int]] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetSnapshot:
    brokers: dict[int, znodes.BrokerRegistration] = field(default_factory=dict)
    appliances: dict[int, znodes.ApplianceRegistration] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    controller: int = -1  # broker.id of the controlling appliance
    controller_owner: int = 0  # the session holding /controller
    controller_epoch: int = 0
    controller_epoch_version: int = -1
    deleting: frozenset[str] = frozenset()

    def load_by_node(self) -> dict[int, int]:
        load: dict[int, int] = {}
        for topic in self.topics.values():
            for replicas in topic.replicas.values():
                for node in replicas:
                    load[node] = load.get(node, 0) + 1
        return load


def _children(session: Session, path: str, watch) -> list[str]:
    try:
        return session.call("get_children", path, watch=watch)
    except NoNodeError:
        return []


def _get(session: Session, path: str, watch=None):
    """(data, stat), or (None, None) for a missing node, watched for its creation too."""
    try:
        return session.call("get", path, watch=watch)
    except NoNodeError:
        if watch is not None and session.call("exists", path, watch=watch) is not None:
            return _get(session, path, watch)  # created between the two calls
        return None, None


def read_fleet(session: Session, watch) -> FleetSnapshot:
    """One consistent-enough pass over the fleet's znodes. Raises ZooKeeperUnavailable."""
    brokers = {}
    for child in _children(session, znodes.BROKER_IDS, watch):
        data, _ = _get(session, znodes.broker_path(int(child)))
        if data is not None:
            path = znodes.broker_path(int(child))
            brokers[int(child)] = znodes.BrokerRegistration.decode(int(child), data, path)
    appliances = {}
    for child in _children(session, znodes.APPLIANCES, watch):
        data, _ = _get(session, znodes.appliance_path(int(child)))
        if data is not None:
            appliances[int(child)] = znodes.ApplianceRegistration.decode(
                data, znodes.appliance_path(int(child)))
    topics = {name: topic for name in _children(session, znodes.TOPICS, watch)
              if (topic := _read_topic(session, name, watch)) is not None}
    controller, owner = -1, 0
    data, stat = _get(session, znodes.CONTROLLER, watch)
    if data is not None:
        controller, owner = znodes.ControllerRecord.decode(data, znodes.CONTROLLER).broker_id, \
            stat.ephemeralOwner
    epoch, epoch_version = 0, -1
    data, stat = _get(session, znodes.CONTROLLER_EPOCH, watch)
    if data is not None:
        epoch, epoch_version = znodes.decode_epoch(data), stat.version
    deleting = frozenset(_children(session, znodes.DELETE_TOPICS, watch))
    return FleetSnapshot(brokers, appliances, topics, controller, owner, epoch, epoch_version,
                         deleting)


def _read_topic(session: Session, name: str, watch) -> TopicState | None:
    data, stat = _get(session, znodes.topic_path(name), watch)
    if data is None:
        return None
    assignment = znodes.TopicAssignment.decode(data, znodes.topic_path(name))
    states = {}
    for partition in assignment.partitions:
        path = znodes.state_path(name, partition)
        state_data, state_stat = _get(session, path, watch)
        if state_data is not None:
            states[partition] = (znodes.PartitionState.decode(state_data, path),
                                 state_stat.version)
    config_data, _ = _get(session, znodes.topic_config_path(name))
    config = (znodes.TopicConfig.decode(config_data, znodes.topic_config_path(name)).config
              if config_data is not None else {})
    return TopicState(name, assignment.partitions, stat.version, states, config)
