"""One appliance's membership of the fleet: what its supervisor calls.

`ClusterMember` holds the session, registers the appliance and each serving node, keeps a
`FleetSnapshot` current, runs for controller and, while elected, does the controller's duties
(`cluster.controller`). All of that happens on one thread of its own, woken by ZooKeeper
watches and by the supervisor; kazoo's callbacks only drop what the watch covered from
the pass's cache (`WatchedReads`) and set an event, so nothing blocks kazoo's thread and the
logic runs one pass at a time. A pass rebuilds the whole snapshot but asks ZooKeeper only for
the nodes that changed since the last one, and reads each node again within
FULL_READ_INTERVAL_S (spread over passes). Partition states come as the notes of their
writes (`state_changes`), read on a second thread and shown at once; the passes keep them
and do not read them back. The supervisor hears of each new snapshot through `on_change`
(called on either thread: hand it on, do not block).

Admin requests (create, delete, producer ids) run on the caller's thread, as Kafka's admin
client did against ZooKeeper: any appliance writes the request, the controller carries it
out. They return Kafka error codes; ZooKeeper being unreachable is REQUEST_TIMED_OUT, which
clients retry.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from cluster import isr as isr_changes
from cluster import state_changes, znodes
from cluster.controller import Election, Fenced, FencedWriter, elect, reconcile, with_states
from cluster.fleet_view import FleetSnapshot, read_fleet, read_snapshot
from cluster.leadership import LeadershipConfig
from cluster.placement import LiveNode, PlacementError, place_replicas
from cluster.preferred import PreferredLeaders
from cluster.session import (
    CONNECTED,
    LOST,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    Session,
    ZooKeeperUnavailable,
)
from cluster.watched_reads import WatchedReads
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)

PASS_INTERVAL_S = 1.0  # a pass runs at least this often, watches or not
# every node is read afresh at least this often (a safety net under the watches' cache),
# each at its own moment (WatchedReads.expire), not all in one pass
FULL_READ_INTERVAL_S = 60.0
SLOW_PASS_S = 1.0  # a pass that takes longer says where its time went (INFO)
CREATE_WAIT_S = 10.0  # how long a topic creation waits for the controller's partition states
PRODUCER_ID_BLOCK = 1000


@dataclass(frozen=True)
class AdminResult:
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


class ClusterMember:
    def __init__(self, connect: str, *, broker_id: int, host: str, rack: str | None = None,
                 session_timeout_ms: int = 18_000, connection_timeout_ms: int = 18_000,
                 leadership: LeadershipConfig | None = None,
                 on_change: Callable[[], None] = lambda: None,
                 digest_credentials: str | None = None, set_acl: bool = False):
        self.broker_id = broker_id
        self.leadership = leadership or LeadershipConfig()
        self.preferred = PreferredLeaders(self.leadership)
        self.host = host
        self.rack = rack
        self.on_change = on_change
        self.session = Session(connect, session_timeout_ms=session_timeout_ms,
                               connection_timeout_ms=connection_timeout_ms,
                               on_state=self._on_state,
                               digest_credentials=digest_credentials, set_acl=set_acl)
        self.cluster_id = ""
        self.election: Election | None = None
        self.state = "NEW"
        self._snapshot = FleetSnapshot()
        self.reads = WatchedReads(self.session, self.wake, refresh_s=FULL_READ_INTERVAL_S)
        # the notes of every partition state written: shown at once, kept for the passes
        self.notes = state_changes.StateChangeFollower(
            self.session, self._noted, missed=self._missed_notes,
            name=f"klog-fleet-notes-{broker_id}")
        self._wake = threading.Event()
        self._changed = threading.Condition()
        self._connected = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"klog-fleet-{broker_id}",
                                        daemon=True)

    # life cycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, make the fleet's roots and cluster id, register this appliance, and start
        following. Raises ZooKeeperUnavailable, RegistrationConflict."""
        self.session.start()
        for root in znodes.PERSISTENT_ROOTS:
            self.session.call("ensure_path", root)
        self.cluster_id = self._cluster_id()
        self.session.register(znodes.appliance_path(self.broker_id),
                              znodes.ApplianceRegistration(self.broker_id, self.rack,
                                                           self.host, True).encode())
        self._pass()
        self._thread.start()
        self.notes.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self.notes.stop()
        if self._thread.is_alive():
            self._thread.join(5)
        self.session.stop()

    def _cluster_id(self) -> str:
        fresh = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        try:
            self.session.call("create", znodes.CLUSTER_ID, znodes.encode_cluster_id(fresh),
                              makepath=True)
            return fresh
        except NodeExistsError:
            data, _ = self.session.call("get", znodes.CLUSTER_ID)
            return znodes.decode_cluster_id(data)

    # nodes ----------------------------------------------------------------------------------

    def register_node(self, node_id: int, port: int,
                      endpoints: tuple[tuple[str, str, str, int], ...] = ()) -> None:
        """A worker serves: it joins the fleet's live nodes, at `endpoints` (listener name,
        security protocol, host, port; none: PLAINTEXT at this member's host and `port`)."""
        self.session.register(znodes.broker_path(node_id),
                              znodes.BrokerRegistration(node_id, self.host, port, self.rack,
                                                        endpoints).encode())
        self.wake()

    def unregister_node(self, node_id: int) -> None:
        """A worker died or stopped: its partitions get other leaders (or go offline)."""
        try:
            self.session.unregister(znodes.broker_path(node_id))
        except ZooKeeperUnavailable as exc:
            log.warning("cannot unregister node %d now (%s); its session will", node_id, exc)
        self.wake()

    def request_controlled_shutdown(self) -> None:
        """Ask the controller to move leadership away from this appliance's nodes
        (`leadership.settle`); the request lives as long as this session, and comes back
        with a new one. Raises ZooKeeperUnavailable."""
        self.session.register(znodes.shutdown_request_path(self.broker_id),
                              znodes.ShutdownRequest(self.broker_id).encode())
        self.wake()

    # the view -------------------------------------------------------------------------------

    def snapshot(self) -> FleetSnapshot:
        return self._snapshot

    @property
    def is_controller(self) -> bool:
        return self.election is not None

    def wake(self, *_args) -> None:
        """Any thread (watches call it): run a pass soon."""
        self._wake.set()

    def wait_connected(self, timeout_s: float) -> bool:
        """Block until the session is connected (at once if it is): kazoo moves to another
        server of the ensemble within moments when one goes away."""
        return self.state == CONNECTED or self._connected.wait(timeout_s)

    def wait_for(self, predicate: Callable[[FleetSnapshot], bool], timeout_s: float) -> bool:
        """Block until a snapshot satisfies `predicate` (tests, topic creation)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self._snapshot):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.2))
        return True

    def _on_state(self, state: str) -> None:
        """SUSPENDED pauses the controller (passes act only while CONNECTED; its fenced
        writes would fail anyway if it lost meanwhile); LOST ends its term: /controller went
        with the session, and the next pass runs for election again."""
        self.state = state
        self.reads.invalidate()  # a new session has none of our watches; read all again
        if state == CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        if state == LOST and self.election is not None:
            log.warning("ZooKeeper session lost: resigning as the fleet's controller")
            self.election = None
        self.wake()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(PASS_INTERVAL_S)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._pass()
            except ZooKeeperUnavailable as exc:
                log.info("fleet pass skipped: %s", exc)
            except Exception:  # noqa: BLE001 - a bug in one pass must not end the thread
                log.exception("fleet pass failed")

    def _pass(self) -> None:
        started = time.monotonic()
        self.reads.expire()  # the safety net: each value read again within the interval
        self.reads.catch_up()
        self.notes.poll()  # every state noted before now, our own writes' included
        caught_up = time.monotonic()
        requests = self.reads.requests
        snapshot = read_snapshot(self.reads)
        read = time.monotonic()
        if snapshot != self._snapshot:
            self._publish(snapshot)
        if read - started > SLOW_PASS_S:
            log.info("fleet pass: %.2f s to apply watch events, %.2f s to read the fleet "
                     "(%d znodes read)", caught_up - started, read - caught_up,
                     self.reads.requests - requests)
        if self.state != CONNECTED:
            return
        if self.election is None and snapshot.controller < 0:
            self.election = elect(self.session, self.broker_id)
            if self.election is not None:
                self.preferred.elected()
                self.wake()
            return
        if self.election is not None and (snapshot.controller != self.broker_id or
                                          snapshot.controller_owner != self.session.session_id):
            log.warning("another appliance controls the fleet now: resigning")
            self.election = None
            return
        if self.election is not None:
            try:
                writer = FencedWriter(self.session, self.election)
                began = time.monotonic()
                written: list = []
                writes = reconcile(writer, snapshot, unclean_default=(
                    self.leadership.unclean_leader_election_enable), written=written)
                if time.monotonic() - began > SLOW_PASS_S:
                    log.info("controller: %d writes in %.2f s", writes,
                             time.monotonic() - began)
                if written:  # known now; the next pass takes them from their notes
                    self._publish(with_states(snapshot, written))
                if not writes:  # on a snapshot that no write of this pass has made stale
                    writes = self.preferred.run(writer, snapshot)
                if self.notes.count > state_changes.KEEP + state_changes.KEEP // 4:
                    state_changes.prune(self.session)  # the leaders' ISR changes' notes
                if writes:
                    self.wake()
            except Fenced as exc:
                log.warning("deposed: %s", exc)
                self.election = None

    def _publish(self, snapshot: FleetSnapshot) -> None:
        with self._changed:
            # a note may have shown some states newer than this read (state_changes.py)
            snapshot = state_changes.keep_newer(snapshot, self._snapshot)
            if snapshot == self._snapshot:
                return
            self._snapshot = snapshot
            self._changed.notify_all()
        self.on_change()

    def _noted(self, changes: list) -> None:
        """States written (by the controller, or a leader's appliance), from their notes:
        shown now, and kept for the passes, which then do not read them back (states are
        not watched: watched_reads.py). A pass runs after for the controller's duties, or
        to read the topics of changes the snapshot could not show (a topic not read yet).
        Otherwise none: a pass would read back what the note showed, and in a failover
        the controller's 50 notes made the other appliances' passes run back to back, each
        building the snapshot of 10,000 partitions anew, on the supervisor that must tell
        its workers the new leaders meanwhile (issue 26); the passes every PASS_INTERVAL_S
        still run."""
        self.reads.note([(c.path, c.data, c.version, c.zxid) for c in changes])
        with self._changed:
            before = self._snapshot
            snapshot = state_changes.apply_changes(before, changes)
            shown = snapshot is not before
            if shown:
                self._snapshot = snapshot
                self._changed.notify_all()
        if shown:
            self.on_change()
        if self.election is not None or state_changes.unknown_topics(before, changes):
            self.wake()

    def _missed_notes(self) -> None:
        self.reads.invalidate()
        self.wake()

    # admin ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str], *, validate_only: bool = False) -> AdminResult:
        """Place and write a new topic; wait (bounded) until its leaders are elected."""
        try:
            # now, not as of the last pass; the assignments only (no partition state)
            snapshot = read_fleet(self.session, self.wake, states=False)
        except ZooKeeperUnavailable as exc:
            return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                               f"ZooKeeper is unreachable, the topic was not created: {exc}")
        if name in snapshot.topics:
            return AdminResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        try:
            replicas = place_replicas(range(partitions), replication_factor,
                                      _live_nodes(snapshot), snapshot.load_by_node())
        except PlacementError as exc:
            return AdminResult(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
        if validate_only:
            return AdminResult()
        assignment = znodes.TopicAssignment(replicas)
        try:
            results = self.session.transaction(lambda tx: (
                tx.create(znodes.topic_path(name), assignment.encode()),
                tx.create(znodes.topic_config_path(name),
                          znodes.TopicConfig(dict(configs)).encode())))
        except ZooKeeperUnavailable as exc:
            return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                               f"ZooKeeper is unreachable, the topic was not created: {exc}")
        if any(isinstance(r, NodeExistsError) for r in results):
            return AdminResult(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if any(isinstance(r, Exception) for r in results):
            return AdminResult(ErrorCode.UNKNOWN_SERVER_ERROR, f"ZooKeeper refused: {results}")
        self.wake()
        self.wait_for(lambda s: name in s.topics and
                      len(s.topics[name].states) == partitions, CREATE_WAIT_S)
        return AdminResult()

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> AdminResult:
        """Grow a topic to `count` partitions: the new ones are placed as a new topic's, with
        the replication factor of its partition 0, and the assignment is written with a
        conditional set, so a concurrent change is re-read, never overwritten. Waits
        (bounded) until the controller has elected the new partitions' leaders."""
        for _ in range(3):
            try:
                snapshot = read_fleet(self.session, self.wake, states=False)
            except ZooKeeperUnavailable as exc:
                return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                                   f"ZooKeeper is unreachable, no partitions were added: {exc}")
            topic = snapshot.topics.get(name)
            if topic is None or name in snapshot.deleting:
                return AdminResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"topic {name!r} does not exist")
            current = len(topic.replicas)
            if count <= current:
                return AdminResult(ErrorCode.INVALID_PARTITIONS,
                                   f"topic {name!r} already has {current} partitions")
            try:
                added = place_replicas(range(current, count), len(topic.replicas[0]),
                                       _live_nodes(snapshot), snapshot.load_by_node())
            except PlacementError as exc:
                return AdminResult(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc))
            if validate_only:
                return AdminResult()
            grown = znodes.TopicAssignment({**topic.replicas, **added}, topic.adding,
                                           topic.removing)  # moves in flight go on
            try:
                self.session.call("set", znodes.topic_path(name), grown.encode(),
                                  version=topic.version)
            except BadVersionError:
                continue  # changed meanwhile: decide again on what it is now
            except NoNodeError:
                return AdminResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"topic {name!r} was deleted meanwhile")
            except ZooKeeperUnavailable as exc:
                return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                                   f"ZooKeeper is unreachable, no partitions were added: {exc}")
            self.wake()
            self.wait_for(lambda s: name in s.topics and len(s.topics[name].states) >= count,
                          CREATE_WAIT_S)
            return AdminResult()
        return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                           f"the assignment of {name!r} kept changing; retry")

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> AdminResult:
        """Replace the topic's overrides in /config/topics/<t>, then Kafka's change
        notification; wait (bounded) until this member's view has them."""
        path = znodes.topic_config_path(name)
        data = znodes.TopicConfig(dict(configs)).encode()
        try:
            if not self.session.call("exists", znodes.topic_path(name)):
                return AdminResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"topic {name!r} does not exist")
            try:
                self.session.call("set", path, data)
            except NoNodeError:
                self.session.call("create", path, data, makepath=True)
            self.session.call("create", "/config/changes/config_change_",
                              orjson.dumps({"version": 2, "entity_path": f"topics/{name}"}),
                              sequence=True, makepath=True)
        except ZooKeeperUnavailable as exc:
            return AdminResult(ErrorCode.REQUEST_TIMED_OUT,
                               f"ZooKeeper is unreachable, the configs were not changed: {exc}")
        self.wake()
        self.wait_for(lambda s: name in s.topics and dict(s.topics[name].config) == configs,
                      CREATE_WAIT_S)
        return AdminResult()

    def delete_topic(self, name: str) -> AdminResult:
        if name not in self._snapshot.topics:
            return AdminResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"topic {name!r} does not exist")
        try:
            self.session.call("create", znodes.delete_request_path(name), b"", makepath=True)
        except NodeExistsError:
            pass
        except ZooKeeperUnavailable as exc:
            return AdminResult(ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper is unreachable: {exc}")
        self.wake()
        self.wait_for(lambda s: name not in s.topics, CREATE_WAIT_S)
        return AdminResult()

    def alter_partitions(self, asks: list[tuple[str, int, int, tuple[int, ...], int]]
                         ) -> list[ErrorCode]:
        """Local leaders' ISR changes, each (topic, partition, leader_epoch, isr, leader),
        together (`cluster.isr.alter_partitions`: conditional sets by the leader's appliance).
        Raises ZooKeeperUnavailable."""
        topics = self._snapshot.topics
        errors = isr_changes.alter_partitions(self.session, [
            isr_changes.IsrAsk(topic, partition, epoch, isr, leader,
                               topics[topic].replicas.get(partition) if topic in topics
                               else None)
            for topic, partition, epoch, isr, leader in asks])
        self.wake()
        return errors

    def allocate_producer_ids(self) -> range:
        """A block of producer ids no other appliance will hand out (Kafka's conditional set
        on /latest_producer_id_block). Raises ZooKeeperUnavailable."""
        while True:
            try:
                data, stat = self.session.call("get", znodes.PRODUCER_ID_BLOCK)
                start = znodes.ProducerIdBlock.decode(data).block_end + 1
                version = stat.version
            except NoNodeError:
                start, version = 0, None
            block = znodes.ProducerIdBlock(self.broker_id, start, start + PRODUCER_ID_BLOCK - 1)
            try:
                if version is None:
                    self.session.call("create", znodes.PRODUCER_ID_BLOCK, block.encode())
                else:
                    self.session.call("set", znodes.PRODUCER_ID_BLOCK, block.encode(),
                                      version=version)
                return range(block.block_start, block.block_end + 1)
            except (NodeExistsError, BadVersionError):
                continue  # another appliance took a block meanwhile


def _live_nodes(snapshot: FleetSnapshot) -> list[LiveNode]:
    return [LiveNode(node_id, registration.rack)
            for node_id, registration in snapshot.brokers.items()]
