"""The supervisor's end of the control channels: the decider serving its workers.

It wraps the `LocalDecider` (catalog, placement, producer ids) and turns each catalog
change into a broadcast to every worker. It never blocks on a worker: it reads what the
supervisor's loop says is readable, and its writes are small.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from appliance.control.channel import (
    Acls,
    AllocateProducerId,
    AlterDynamicConfigs,
    AlterPartition,
    AlterScram,
    AlterTopicConfigs,
    Catalog,
    ClusterAdmin,
    ControlChannelError,
    CreateAcls,
    CreatePartitions,
    CreateTopic,
    DeleteAcls,
    DeleteTopic,
    DynamicConfigs,
    Fleet,
    Message,
    MessageReader,
    PartitionsChanged,
    Ready,
    Reply,
    ScramUsers,
    TopicChanged,
    TopicDeleted,
    encode,
)
from appliance.control.decisions import LocalDecider
from appliance.control.fleet import FleetRelay
from appliance.control.topics import FleetNode, TopicInfo, TopicResult, changed_partitions
from appliance.identity import node_id_for
from appliance.security.acl_book import AclBook
from appliance.security.fleet_acl_book import FleetAclBook
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)


class WorkerChannel:
    def __init__(self, index: int, sock: socket.socket):
        self.index = index
        self.sock = sock
        self.reader = MessageReader()
        self.ready = False

    def send(self, message: Message) -> None:
        self.sock.sendall(encode(message))

    def send_encoded(self, data: bytes) -> None:
        self.sock.sendall(data)


class ControlServer:
    """Requests from workers in, replies and catalog broadcasts out.

    `broker_id` makes a worker's index its node id: the leader an AlterPartition comes from
    is the worker whose channel it arrived on."""

    def __init__(self, decider: LocalDecider | FleetRelay, *, cluster_id: str,
                 broker_id: int, on_ready: Callable[[int], None] = lambda index: None,
                 acls: AclBook | FleetAclBook | None = None, scram=None, configs=None):
        self.decider = decider
        self.acls = acls  # the ACLs and their file (an authorizer is configured), or None
        # the SCRAM users' writer: ScramFileStore alone, FleetMembership in a fleet (whose
        # `users()` are broadcast to the workers; alone they read the file themselves)
        self.scram = scram
        # the dynamic config store (LocalConfigStore alone, FleetConfigStore in a fleet)
        self.configs = configs
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.on_ready = on_ready
        self.channels: dict[int, WorkerChannel] = {}
        self._fleet: Fleet | None = None  # cluster mode: the fleet as last seen
        self._handlers: dict[type, Callable[[WorkerChannel, Message], Reply | None]] = {
            CreateTopic: self._create_topic,
            DeleteTopic: self._delete_topic,
            CreatePartitions: self._create_partitions,
            AllocateProducerId: self._allocate_producer_id,
            CreateAcls: self._create_acls,
            DeleteAcls: self._delete_acls,
            AlterScram: self._alter_scram,
            AlterTopicConfigs: self._alter_topic_configs,
            AlterDynamicConfigs: self._alter_dynamic_configs,
            ClusterAdmin: self._cluster_admin,
            Ready: self._ready,
        }
        # topic -> the TopicInfo last broadcast: a change of some of its partitions goes out
        # as a PartitionsChanged against it (every worker holds the same, from its catalog
        # and the broadcasts since, which all come from here in order)
        self._told: dict[str, TopicInfo] = {t.name: t for t in decider.topics()}
        decider.add_listener(self._broadcast_change)
        # told at once of the fleet already seen: every worker hears of it before its catalog
        decider.add_fleet_listener(self._broadcast_fleet)

    def attach(self, index: int, sock: socket.socket) -> WorkerChannel:
        """A (re)started worker's channel; it first receives the whole catalog (and, in
        cluster mode, the fleet's live nodes)."""
        channel = WorkerChannel(index, sock)
        self.channels[index] = channel
        if self._fleet is not None:
            channel.send(self._fleet)
        if self.acls is not None:  # before the catalog: a worker serves only after both
            channel.send(Acls(tuple(sorted(self.acls.acls))))
        users = self.scram.users() if self.scram is not None else None
        if users is not None:
            channel.send(ScramUsers(users))
        if self.configs is not None:
            channel.send(DynamicConfigs(self.configs.entities()))
        channel.send(Catalog(self.cluster_id, tuple(self.decider.topics())))
        return channel

    def _broadcast_fleet(self, nodes: dict[int, FleetNode], controller_node_id: int) -> None:
        self._fleet = Fleet(controller_node_id, tuple(nodes.values()),
                            dict(self.decider.node_configs))
        self.broadcast(self._fleet)

    def detach(self, index: int) -> None:
        channel = self.channels.pop(index, None)
        if channel is not None:
            channel.sock.close()

    def by_fileno(self) -> dict[int, WorkerChannel]:
        return {c.sock.fileno(): c for c in self.channels.values()}

    def on_readable(self, channel: WorkerChannel) -> None:
        """Serve every whole request that has arrived; drop the channel if it is broken."""
        try:
            data = channel.sock.recv(1 << 16)
            if not data:
                raise ControlChannelError("worker closed its control channel")
            channel.reader.feed(data)
            asks = []  # AlterPartitions: answered together, after the others of this read
            try:
                for message in channel.reader.messages():
                    if isinstance(message, AlterPartition):
                        asks.append(message)
                    else:
                        self._serve(channel, message)
            finally:
                if asks:
                    self._alter_partitions(channel, asks)
        except (ControlChannelError, OSError) as exc:
            log.info("control channel of worker %d: %s", channel.index, exc)
            self.detach(channel.index)

    def _serve(self, channel: WorkerChannel, message: Message) -> None:
        handler = self._handlers.get(type(message))
        if handler is None:
            raise ControlChannelError(f"{type(message).__name__} is not a request "
                                      f"(from worker {channel.index})")
        reply = handler(channel, message)
        if reply is not None:
            channel.send(reply)

    # one handler per request ---------------------------------------------------------------

    def _create_topic(self, channel: WorkerChannel, request: CreateTopic) -> Reply:
        return _answer(request, self.decider.create_topic(
            request.name, request.partitions, request.replication_factor, request.configs,
            validate_only=request.validate_only))

    def _delete_topic(self, channel: WorkerChannel, request: DeleteTopic) -> Reply:
        return _answer(request, self.decider.delete_topic(request.name))

    def _create_partitions(self, channel: WorkerChannel, request: CreatePartitions) -> Reply:
        return _answer(request, self.decider.create_partitions(
            request.name, request.count, validate_only=request.validate_only))

    def _allocate_producer_id(self, channel: WorkerChannel,
                              request: AllocateProducerId) -> Reply:
        return Reply(request.id, producer_id=self.decider.allocate_producer_id())

    def _alter_partitions(self, channel: WorkerChannel, requests: list[AlterPartition]) -> None:
        """The ISR changes one read brought, in one go: a worker whose follower came back
        asks for hundreds within a step of its loop (cluster/isr.py `alter_partitions`)."""
        leader = node_id_for(self.broker_id, channel.index)
        errors = self.decider.alter_partitions([(request, leader) for request in requests])
        for request, error in zip(requests, errors, strict=True):
            channel.send(Reply(request.id, error=error))

    def _create_acls(self, channel: WorkerChannel, request: CreateAcls) -> Reply:
        if self.acls is None:
            return Reply(request.id, error=ErrorCode.SECURITY_DISABLED,
                         message="No Authorizer is configured.")
        try:
            changed = self.acls.create(request.acls)
        except OSError as exc:
            log.error("cannot write the ACLs: %s", exc)
            return Reply(request.id, error=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
        if changed:
            self.broadcast(Acls(tuple(sorted(self.acls.acls))))
        return Reply(request.id)

    def _delete_acls(self, channel: WorkerChannel, request: DeleteAcls) -> Reply:
        if self.acls is None:
            return Reply(request.id, error=ErrorCode.SECURITY_DISABLED,
                         message="No Authorizer is configured.")
        try:
            removed = self.acls.delete(request.filters)
        except OSError as exc:
            log.error("cannot write the ACLs: %s", exc)
            return Reply(request.id, error=ErrorCode.UNKNOWN_SERVER_ERROR, message=str(exc))
        if removed:
            self.broadcast(Acls(tuple(sorted(self.acls.acls))))
        return Reply(request.id, acls=tuple(sorted(removed)))

    def _alter_scram(self, channel: WorkerChannel, request: AlterScram) -> Reply:
        if self.scram is None:
            return Reply(request.id, error=ErrorCode.UNSUPPORTED_VERSION,
                         message="SCRAM users cannot be altered here")
        try:
            self.scram.alter(request.changes)
        except (OSError, ValueError) as exc:  # ZooKeeper unavailable, the file unwritable
            log.error("cannot alter SCRAM credentials: %s", exc)
            code = (ErrorCode.REQUEST_TIMED_OUT if isinstance(exc, ConnectionError)
                    else ErrorCode.UNKNOWN_SERVER_ERROR)
            return Reply(request.id, error=code, message=str(exc))
        self.broadcast_security()  # the asking worker knows the change before its client
        return Reply(request.id)

    def _alter_topic_configs(self, channel: WorkerChannel, request: AlterTopicConfigs) -> Reply:
        return _answer(request, self.decider.alter_topic_configs(
            request.name, request.configs, validate_only=request.validate_only))

    def _alter_dynamic_configs(self, channel: WorkerChannel,
                               request: AlterDynamicConfigs) -> Reply:
        if self.configs is None:
            return Reply(request.id, error=ErrorCode.INVALID_REQUEST,
                         message="dynamic configs are not kept here")
        try:
            self.configs.alter(request.entity_type, request.name, request.changes)
        except ValueError as exc:
            return Reply(request.id, error=ErrorCode.INVALID_REQUEST, message=str(exc))
        except OSError as exc:  # ZooKeeper unavailable, the file unwritable
            log.error("cannot alter dynamic configs: %s", exc)
            code = (ErrorCode.REQUEST_TIMED_OUT if isinstance(exc, ConnectionError)
                    else ErrorCode.UNKNOWN_SERVER_ERROR)
            return Reply(request.id, error=code, message=str(exc))
        self.broadcast_dynamic_configs()  # the asking worker knows before its client
        return Reply(request.id)

    def broadcast_dynamic_configs(self) -> None:
        """After the dynamic config store changed (here, or in ZooKeeper): tell every worker."""
        if self.configs is not None:
            self.broadcast(DynamicConfigs(self.configs.entities()))

    def broadcast_security(self) -> None:
        """In a fleet, after the users or ACLs in ZooKeeper changed: tell every worker."""
        users = self.scram.users() if self.scram is not None else None
        if users is not None:
            self.broadcast(ScramUsers(users))
        if self.acls is not None and users is not None:
            self.broadcast(Acls(tuple(sorted(self.acls.acls))))

    def _cluster_admin(self, channel: WorkerChannel, request: ClusterAdmin) -> Reply:
        error, answer = self.decider.cluster_admin(request.op, request.args)
        return Reply(request.id, error=error, message=answer)

    def _ready(self, channel: WorkerChannel, message: Ready) -> None:
        channel.ready = True
        self.on_ready(channel.index)

    # broadcasts ----------------------------------------------------------------------------

    def _broadcast_change(self, name, info) -> None:
        if info is None:
            self._told.pop(name, None)
            self.broadcast(TopicDeleted(name))
            return
        told = self._told.get(name)
        self._told[name] = info
        changed = changed_partitions(told, info)
        if changed is None:
            self.broadcast(TopicChanged(info))
        elif changed:
            self.broadcast(PartitionsChanged(
                name, changed, tuple(info.owners[i] for i in changed),
                tuple(info.leadership[i] for i in changed)))

    def broadcast(self, message: Message) -> None:
        """Encoded once for every worker: a topic of 10,000 partitions is a large message,
        and a fleet's failover broadcasts many."""
        data = encode(message)
        for channel in list(self.channels.values()):
            try:
                channel.send_encoded(data)
            except OSError as exc:
                log.info("cannot tell worker %d: %s", channel.index, exc)
                self.detach(channel.index)


def _answer(request: CreateTopic | DeleteTopic | CreatePartitions | AlterTopicConfigs,
            result: TopicResult) -> Reply:
    return Reply(request.id, error=result.error, message=result.message)
