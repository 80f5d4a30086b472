"""The fleet as ZooKeeper holds it, read in one pass: live nodes, appliances, topics with their
assignments, partition states and configs, the controller and its epoch, pending deletions,
appliances asking for a controlled shutdown, a requested preferred-replica election, the
pending reassignment request and the nodes' dynamic configs (replication throttles).

Every read arms a watch (partition states excepted: they are followed by the notes of their
writes, state_changes.py), so any change anywhere re-runs the reader's owner, which then
builds the whole snapshot again (level-triggered, like a reconcile loop: every decision is
taken on a whole view, never on an edge). The member reads through `WatchedReads`, which
asks ZooKeeper only for the nodes whose watch fired since (watched_reads.py says why that is
as good as reading them again); `read_fleet` reads everything afresh (admin requests, the
command line).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from cluster import znodes
from cluster.session import NoNodeError, Session
from cluster.watched_reads import DirectReads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicState:
    name: str
    replicas: dict[int, tuple[int, ...]]
    version: int  # of the assignment node, for conditional partition additions
    states: dict[int, tuple[znodes.PartitionState, int]] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
    # partitions being reassigned (KIP-455): the replicas being added and being removed
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # the zxid that created the assignment node: tells a topic from an earlier one of the
    # same name (a note of states written before it is not about it: state_changes.py)
    created: int = 0


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
    # appliances (broker.id) asking for a controlled shutdown (leadership.py)
    shutting_down: frozenset[int] = frozenset()
    # a requested preferred-replica election and its node's version (preferred.py)
    preferred_election: tuple[znodes.PreferredElection, int] | None = None
    # /admin/reassign_partitions and its version; None: no request waits for the controller
    reassign_request: znodes.ReassignmentRequest | None = None
    reassign_request_version: int = -1
    reassign_request_error: str | None = None  # a request that does not parse, and why
    # /config/brokers/<node> of the live nodes: their dynamic configs (replication throttles)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)

    def load_by_node(self) -> dict[int, int]:
        load: dict[int, int] = {}
        for topic in self.topics.values():
            for replicas in topic.replicas.values():
                for node in replicas:
                    load[node] = load.get(node, 0) + 1
        return load


def _children(reads, path: str) -> list[str]:
    try:
        return reads.children(path)
    except NoNodeError:
        return []


def read_fleet(session: Session, watch, *, states: bool = True) -> FleetSnapshot:
    """A fresh read of every node (watched with `watch` when given). Without `states`, no
    partition state is read (every `TopicState.states` empty): placing a new topic needs
    the assignments only, and reading 10,000 states per CreateTopics made creating many
    topics grow with the square of the partitions. Raises ZooKeeperUnavailable."""
    return read_snapshot(DirectReads(session, watch), states=states)


def read_snapshot(reads, *, states: bool = True) -> FleetSnapshot:
    """One consistent-enough pass over the fleet's znodes through `reads` (`DirectReads` or
    `WatchedReads`), in a few pipelined round trips at most (lists, then the nodes they
    name, then every partition's state). Raises ZooKeeperUnavailable."""
    broker_ids = [int(c) for c in _children(reads, znodes.BROKER_IDS)]
    appliance_ids = [int(c) for c in _children(reads, znodes.APPLIANCES)]
    names = _children(reads, znodes.TOPICS)
    deleting = frozenset(_children(reads, znodes.DELETE_TOPICS))
    shutting_down = frozenset(int(c) for c in _children(reads, znodes.CONTROLLED_SHUTDOWN))
    paths = ([znodes.broker_path(b) for b in broker_ids] +
             [znodes.appliance_path(a) for a in appliance_ids] +
             [znodes.topic_config_path(n) for n in names] +
             [znodes.broker_config_path(b) for b in broker_ids] +
             [znodes.REASSIGN_PARTITIONS, znodes.CONTROLLER, znodes.CONTROLLER_EPOCH,
              znodes.PREFERRED_REPLICA_ELECTION] +
             [znodes.topic_path(n) for n in names])
    found = iter(reads.get_many(paths))
    brokers = {}
    for broker_id in broker_ids:
        if (got := next(found)) is not None:
            path = znodes.broker_path(broker_id)
            brokers[broker_id] = znodes.BrokerRegistration.decode(broker_id, got[0], path)
    appliances = {}
    for appliance_id in appliance_ids:
        if (got := next(found)) is not None:
            path = znodes.appliance_path(appliance_id)
            appliances[appliance_id] = znodes.ApplianceRegistration.decode(got[0], path)
    configs = {name: got for name in names if (got := next(found)) is not None}
    broker_configs = {b: znodes.TopicConfig.decode(got[0], znodes.broker_config_path(b)).config
                      for b in broker_ids if (got := next(found)) is not None}
    request_node, controller_node, epoch_node, election_node = (next(found) for _ in range(4))
    assignment_nodes = list(found)
    controller, owner = -1, 0
    if controller_node is not None:
        data, stat = controller_node
        controller = znodes.ControllerRecord.decode(data, znodes.CONTROLLER).broker_id
        owner = stat.ephemeralOwner
    epoch, epoch_version = 0, -1
    if epoch_node is not None:
        epoch, epoch_version = znodes.decode_epoch(epoch_node[0]), epoch_node[1].version
    assignments = {name: (znodes.TopicAssignment.decode(got[0], znodes.topic_path(name)),
                          got[1].version, got[1].czxid)
                   for name, got in zip(names, assignment_nodes) if got is not None}
    election = None
    if election_node is not None:
        election = (_election(election_node[0]), election_node[1].version)
    if states:
        # states are followed by their notes once every appliance writes them (a fleet in a
        # rolling upgrade from before the notes watches each state, as it did)
        noted = bool(appliances) and all(a.state_notes for a in appliances.values())
        topics = _read_states(reads, assignments, configs, noted)
    else:
        topics = {name: TopicState(name, assignment.partitions, version, {},
                                   _config(configs, name), assignment.adding,
                                   assignment.removing, created)
                  for name, (assignment, version, created) in assignments.items()}
    request, request_version, request_error = None, -1, None
    if request_node is not None:
        request_version = request_node[1].version
        try:
            request = znodes.ReassignmentRequest.decode(request_node[0])
        except znodes.ZnodeError as exc:  # the controller deletes it, saying why
            request, request_error = znodes.ReassignmentRequest(()), str(exc)
    return FleetSnapshot(brokers, appliances, topics, controller, owner, epoch, epoch_version,
                         deleting, shutting_down, election, request, request_version,
                         request_error, broker_configs)


def _election(data: bytes) -> znodes.PreferredElection:
    """A request the controller cannot read is reported and taken as empty (the controller
    then removes it): unlike the fleet's own state, a request must not stall every pass."""
    try:
        return znodes.PreferredElection.decode(data)
    except znodes.ZnodeError as exc:
        log.error("ignoring a preferred replica election request: %s", exc)
        return znodes.PreferredElection(())


@functools.lru_cache(maxsize=1 << 16)
def _state_of(data: bytes) -> znodes.PartitionState:
    return znodes.PartitionState.decode(data, "a partition state")


def _decoded_state(data: bytes, path: str) -> znodes.PartitionState:
    """A state znode's content decoded once per distinct bytes: every pass builds the whole
    snapshot again, and decoding 10,000 unchanged states each time was most of a pass's
    cost (PartitionState is frozen, so one instance may stand for many). A node that does
    not parse is decoded again to raise naming its path."""
    try:
        return _state_of(data)
    except znodes.ZnodeError:
        return znodes.PartitionState.decode(data, path)


def _read_states(reads, assignments: dict, configs: dict,
                 noted: bool) -> dict[str, TopicState]:
    wanted = [(name, partition) for name, (assignment, _, _) in assignments.items()
              for partition in assignment.partitions]
    paths = [znodes.state_path(n, p) for n, p in wanted]
    get = reads.get_noted if noted else reads.get_many
    found = get(paths)
    # a state kept from a deleted topic of the same name (states are followed by notes, not
    # watched: watched_reads.py) is older than its assignment: read it again
    stale = [i for i, ((name, _), got) in enumerate(zip(wanted, found))
             if got is not None and got[1].mzxid < assignments[name][2]]
    if stale:
        reads.forget([paths[i] for i in stale])
        for i, got in zip(stale, get([paths[i] for i in stale])):
            found[i] = got
    states: dict[str, dict] = {name: {} for name in assignments}
    for (name, partition), got in zip(wanted, found):
        if got is not None:
            path = znodes.state_path(name, partition)
            states[name][partition] = (_decoded_state(got[0], path), got[1].version)
    return {name: TopicState(name, assignment.partitions, version, states[name],
                             _config(configs, name), assignment.adding, assignment.removing,
                             created)
            for name, (assignment, version, created) in assignments.items()}


def _config(configs: dict, name: str) -> dict[str, str]:
    if name not in configs:
        return {}
    return znodes.TopicConfig.decode(configs[name][0], znodes.topic_config_path(name)).config
