"""The worker's end of the control channel: the `ControlPlane` a worker holds.

Requests block the worker's loop for one round trip over a Unix socket (tens of µs): they
happen on topic creation and producer start, never on the produce or fetch path. An ISR
change is the exception that does not block: its answer depends on a ZooKeeper write, so it
is sent at once and answered through a callback. Broadcasts and such answers are applied as
they arrive, both while waiting for a reply and when the event loop reports the socket
readable (`pump`). The message vocabulary is in `appliance.control.channel`.
"""

from __future__ import annotations

import dataclasses
import select
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
    Reload,
    Reply,
    Request,
    ScramUsers,
    TopicChanged,
    TopicDeleted,
    encode,
)
from appliance.control.departed_nodes import DepartedNodes
from appliance.control.interface import ReloadListener, WorkerTopicListener
from appliance.control.topics import FleetNode, TopicInfo, TopicResult
from appliance.scram_credentials import ScramChange
from appliance.security.acls import AclBinding, AclFilter
from appliance.security.authorizer import AclIndex
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode


class ControlPlaneClient:
    """Implements `appliance.control.interface.ControlPlane` over the control channel."""

    def __init__(self, sock: socket.socket, *, defaults: LogConfig, default_partitions: int):
        self.sock = sock
        self._kept: list[bytes] = []  # read by `tell` while its send waited, not handled yet
        # called after `tell` kept bytes: the worker's loop then pumps (its reader callback
        # would not fire for bytes already read)
        self.on_kept: Callable[[], None] | None = None
        self.defaults = defaults
        self.default_partitions = default_partitions
        self.cluster_id = ""
        self.fleet_nodes: dict[int, FleetNode] | None = None
        self.departed_nodes = DepartedNodes()  # left the fleet lately (Metadata's grace)
        self.fleet_controller_id = -1
        self.fleet_node_configs: dict[int, dict[str, str]] = {}
        self.acls = AclIndex()  # the ACLs in force, as last broadcast
        self.scram_users: dict = {}  # in a fleet: the SCRAM users, as last broadcast
        # the dynamic config store (type -> name -> configs), as last broadcast
        self.dynamic_configs: dict[str, dict[str, dict[str, str]]] = {}
        self._dynamic_listeners: list[Callable[[dict], None]] = []
        self._has_catalog = False
        self._reader = MessageReader()
        self._topics: dict[str, TopicInfo] = {}
        self._listeners: list[WorkerTopicListener] = []
        self._reload_listeners: list[ReloadListener] = []
        self._replies: list[Reply] = []
        self._callbacks: dict[int, Callable[[Reply], None]] = {}  # request id -> on_reply
        self._next_id = 0
        self._handlers: dict[type, Callable[[Message], None]] = {
            Reply: self._on_reply,
            Catalog: self._on_catalog,
            TopicChanged: self._on_topic_changed,
            PartitionsChanged: self._on_partitions_changed,
            TopicDeleted: self._on_topic_deleted,
            Reload: self._on_reload,
            Fleet: self._on_fleet,
            Acls: self._on_acls,
            ScramUsers: self._on_scram_users,
            DynamicConfigs: self._on_dynamic_configs,
        }

    # the ControlPlane interface ------------------------------------------------------------

    def add_listener(self, listener: WorkerTopicListener) -> None:
        self._listeners.append(listener)

    def add_reload_listener(self, listener: ReloadListener) -> None:
        self._reload_listeners.append(listener)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def create_topic(self, name, partitions=-1, replication_factor=-1, configs=None, *,
                     validate_only=False) -> TopicResult:
        reply = self._request(CreateTopic(name, partitions, replication_factor,
                                          dict(configs or {}), validate_only))
        return TopicResult(name, reply.error, reply.message)

    def delete_topic(self, name: str) -> TopicResult:
        reply = self._request(DeleteTopic(name))
        return TopicResult(name, reply.error, reply.message)

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> TopicResult:
        reply = self._request(CreatePartitions(name, count, validate_only))
        return TopicResult(name, reply.error, reply.message)

    def allocate_producer_id(self) -> int:
        return self._request(AllocateProducerId()).producer_id

    def create_acls(self, acls: list[AclBinding]) -> tuple[ErrorCode, str | None]:
        reply = self._request(CreateAcls(tuple(acls)))
        return reply.error, reply.message

    def delete_acls(self, filters: list[AclFilter]
                    ) -> tuple[ErrorCode, str | None, tuple[AclBinding, ...]]:
        reply = self._request(DeleteAcls(tuple(filters)))
        return reply.error, reply.message, reply.acls

    def alter_scram(self, changes: list[ScramChange]) -> tuple[ErrorCode, str | None]:
        reply = self._request(AlterScram(tuple(changes)))
        return reply.error, reply.message

    def alter_topic_configs(self, name: str, configs: dict[str, str], *,
                            validate_only: bool = False) -> TopicResult:
        reply = self._request(AlterTopicConfigs(name, dict(configs), validate_only))
        return TopicResult(name, reply.error, reply.message)

    def alter_dynamic_configs(self, entity_type: str, name: str,
                              changes: dict[str, str | None]) -> tuple[ErrorCode, str | None]:
        reply = self._request(AlterDynamicConfigs(entity_type, name, dict(changes)))
        return reply.error, reply.message

    def add_dynamic_config_listener(self, listener: Callable[[dict], None]) -> None:
        self._dynamic_listeners.append(listener)

    def cluster_admin(self, op: str, args: str) -> tuple[ErrorCode, str | None]:
        reply = self._request(ClusterAdmin(op, args))
        return reply.error, reply.message

    def alter_partition(self, request: AlterPartition,
                        on_done: Callable[[ErrorCode], None]) -> None:
        self._send_request(request, lambda reply: on_done(reply.error))

    # plumbing ----------------------------------------------------------------------------

    def tell(self, message: Request | Ready) -> None:
        """Send a message (a request, or `Ready` that needs no reply). Whole, even on the
        loop's non-blocking socket: a part sent alone would garble the channel.

        While the supervisor cannot take more, what it sends meanwhile is read and kept,
        not handled (the caller may be walking its partitions): the supervisor may itself
        be blocked sending to us. Both sides blocked in a full send was a deadlock that the
        heartbeat watchdog ended 30 s later by killing the worker (issue 26: 10,000
        partitions, ISR changes asked while whole-topic broadcasts came). `pump` and the
        blocking waits handle the kept bytes first; `on_kept` asks the loop for a pump."""
        data = memoryview(encode(message))
        blocking = self.sock.getblocking()
        self.sock.setblocking(False)
        kept = False
        try:
            while data:
                try:
                    data = data[self.sock.send(data):]
                except BlockingIOError:
                    readable, _, _ = select.select([self.sock], [self.sock], [])
                    if readable:
                        kept = self._keep_incoming() or kept
        except OSError as exc:
            raise ControlChannelError(f"supervisor is gone: {exc}") from None
        finally:
            self.sock.setblocking(blocking)
        if kept and self.on_kept is not None:
            self.on_kept()

    def _keep_incoming(self) -> bool:
        try:
            chunk = self.sock.recv(1 << 16)
        except BlockingIOError:
            return False
        if not chunk:
            raise ControlChannelError("supervisor closed the control channel")
        self._kept.append(chunk)
        return True

    def _consume_kept(self) -> bool:
        """Handle the bytes `tell` kept, in order; False if there were none."""
        if not self._kept:
            return False
        data = b"".join(self._kept)
        self._kept.clear()
        self._consume(data)
        return True

    def _numbered(self, request: Request) -> Request:
        self._next_id += 1
        return dataclasses.replace(request, id=self._next_id)

    def _send_request(self, request: Request, on_reply: Callable[[Reply], None]) -> None:
        """Send a request without waiting: `on_reply(reply)` runs when its reply is read,
        by `pump` or while a later blocking request waits for its own."""
        request = self._numbered(request)
        self._callbacks[request.id] = on_reply
        self.tell(request)

    def _request(self, request: Request) -> Reply:
        request = self._numbered(request)
        self.tell(request)
        self.sock.setblocking(True)
        try:
            while not self._replies:
                self._receive_blocking()
        finally:
            self.sock.setblocking(False)
        reply = self._replies.pop(0)
        if reply.id != request.id:
            raise ControlChannelError(f"reply {reply.id} to request {request.id}")
        return reply

    def _receive_blocking(self) -> None:
        if self._consume_kept():
            return
        data = self.sock.recv(1 << 16)
        if not data:
            raise ControlChannelError("supervisor closed the control channel")
        self._consume(data)

    def pump(self) -> None:
        """Read what has arrived without blocking (the event loop's reader callback)."""
        self._consume_kept()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as exc:  # ECONNRESET: the supervisor died with bytes unread
                raise ControlChannelError(f"the control channel failed: {exc}") from exc
            if not data:
                raise ControlChannelError("supervisor closed the control channel")
            self._consume(data)

    def wait_for_catalog(self) -> None:
        """Block until the first message, the whole catalog, has arrived."""
        self.sock.setblocking(True)
        try:
            while not self._has_catalog:
                self._receive_blocking()
        finally:
            self.sock.setblocking(False)

    def _consume(self, data: bytes) -> None:
        self._reader.feed(data)
        for message in self._reader.messages():
            handler = self._handlers.get(type(message))
            if handler is None:
                raise ControlChannelError(f"{type(message).__name__} is a worker's message")
            handler(message)

    # one handler per message from the supervisor -----------------------------------------

    def _on_reply(self, reply: Reply) -> None:
        callback = self._callbacks.pop(reply.id, None)
        if callback is not None:
            callback(reply)
        else:
            self._replies.append(reply)

    def _on_catalog(self, catalog: Catalog) -> None:
        self._topics = {t.name: t for t in catalog.topics}
        self.cluster_id = catalog.cluster_id
        self._has_catalog = True

    def _on_topic_changed(self, changed: TopicChanged) -> None:
        info = changed.info
        self._topics[info.name] = info
        for listener in self._listeners:
            listener(info.name, info, None)

    def _on_partitions_changed(self, changed: PartitionsChanged) -> None:
        """Some partitions of a topic we hold: the topic with their new states; the
        listeners hear which changed. One we do not hold, or that does not fit, means the
        supervisor's view and ours differ: ControlChannelError (the worker restarts and
        starts again from a whole catalog)."""
        held = self._topics.get(changed.name)
        if held is None:
            raise ControlChannelError(f"partitions of unknown topic {changed.name!r} changed")
        try:
            info = held.with_partitions(changed.indexes, changed.owners, changed.leadership)
        except ValueError as exc:
            raise ControlChannelError(str(exc)) from None
        self._topics[info.name] = info
        for listener in self._listeners:
            listener(info.name, info, changed.indexes)

    def _on_topic_deleted(self, deleted: TopicDeleted) -> None:
        self._topics.pop(deleted.name, None)
        for listener in self._listeners:
            listener(deleted.name, None, None)

    def _on_reload(self, reload: Reload) -> None:
        self.defaults = reload.log_defaults
        self.default_partitions = reload.num_partitions
        for listener in self._reload_listeners:
            listener(reload)

    def _on_fleet(self, fleet: Fleet) -> None:
        nodes = {n.node_id: n for n in fleet.nodes}
        if self.fleet_nodes is not None and self.fleet_nodes.keys() - nodes.keys():
            self.departed_nodes.update(self.fleet_nodes, nodes, {
                state.leader for info in self._topics.values()
                for state in (info.leadership or ())})
        else:
            self.departed_nodes.update(self.fleet_nodes, nodes)
        self.fleet_nodes = nodes
        self.fleet_controller_id = fleet.controller_id
        self.fleet_node_configs = dict(fleet.node_configs)

    def _on_acls(self, acls: Acls) -> None:
        self.acls = AclIndex(acls.acls)

    def _on_dynamic_configs(self, message: DynamicConfigs) -> None:
        self.dynamic_configs = message.entities
        for listener in self._dynamic_listeners:
            listener(message.entities)

    def _on_scram_users(self, message: ScramUsers) -> None:
        self.scram_users = message.users
