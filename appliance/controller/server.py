"""The supervisor's end of the control channels: the controller serving its workers.

It wraps the `ApplianceController` (catalog, placement, producer ids) and turns each catalog
change into a broadcast to every worker. It never blocks on a worker: it reads what the
supervisor's loop says is readable, and its writes are small.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from appliance.controller.channel import (
    ControlChannelError,
    MessageReader,
    encode,
    topic_to_message,
)
from appliance.controller.decisions import ApplianceController
from appliance.controller.fleet import FleetDecisions
from klog.protocol.error_codes import ErrorCode

log = logging.getLogger(__name__)


class WorkerChannel:
    def __init__(self, index: int, sock: socket.socket):
        self.index = index
        self.sock = sock
        self.reader = MessageReader()
        self.ready = False

    def send(self, message: dict) -> None:
        self.sock.sendall(encode(message))


class ControlServer:
    """Requests from workers in, replies and catalog broadcasts out."""

    def __init__(self, controller: ApplianceController | FleetDecisions, *, cluster_id: str,
                 on_ready: Callable[[int], None] = lambda index: None):
        self.controller = controller
        self.cluster_id = cluster_id
        self.on_ready = on_ready
        self.channels: dict[int, WorkerChannel] = {}
        self._fleet: dict | None = None
        controller.add_listener(self._broadcast_change)
        if isinstance(controller, FleetDecisions):
            controller.add_fleet_listener(self._broadcast_fleet)
            # the fleet as already seen: every worker hears of it before its first catalog
            self._fleet = self._fleet_message(controller.nodes, controller.controller_node_id)

    def attach(self, index: int, sock: socket.socket) -> WorkerChannel:
        """A (re)started worker's channel; it first receives the whole catalog (and, in
        cluster mode, the fleet's live nodes)."""
        channel = WorkerChannel(index, sock)
        self.channels[index] = channel
        if self._fleet is not None:
            channel.send(self._fleet)
        channel.send({"op": "catalog", "cluster_id": self.cluster_id,
                      "topics": [topic_to_message(t) for t in self.controller.topics()]})
        return channel

    def _fleet_message(self, nodes: dict, controller_node_id: int) -> dict:
        return {"op": "fleet", "controller_id": controller_node_id,
                "nodes": [[n.node_id, n.host, n.port, n.rack] for n in nodes.values()],
                "node_configs": [[node, configs]
                                 for node, configs in self.controller.node_configs.items()]}

    def _broadcast_fleet(self, nodes: dict, controller_node_id: int) -> None:
        self._fleet = self._fleet_message(nodes, controller_node_id)
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
            for message in channel.reader.messages():
                self._serve(channel, message)
        except (ControlChannelError, OSError) as exc:
            log.info("control channel of worker %d: %s", channel.index, exc)
            self.detach(channel.index)

    def _serve(self, channel: WorkerChannel, message: dict) -> None:
        op = message.get("op")
        if op == "ready":
            channel.ready = True
            self.on_ready(channel.index)
            return
        if op == "create_topic":
            result = self.controller.create_topic(
                message["name"], message["partitions"], message["replication_factor"],
                message["configs"], validate_only=message["validate_only"])
            reply = {"error": int(result.error), "message": result.message}
        elif op == "delete_topic":
            result = self.controller.delete_topic(message["name"])
            reply = {"error": int(result.error), "message": result.message}
        elif op == "create_partitions":
            result = self.controller.create_partitions(
                message["name"], message["count"], validate_only=message["validate_only"])
            reply = {"error": int(result.error), "message": result.message}
        elif op == "allocate_producer_id":
            reply = {"producer_id": self.controller.allocate_producer_id()}
        elif op == "alter_isr":  # alone there is no replication, so no ISR to change
            error = (self.controller.alter_isr(message["topic"], message["partition"],
                                               channel.index, message["leader_epoch"],
                                               message["isr"])
                     if isinstance(self.controller, FleetDecisions)
                     else ErrorCode.INVALID_REQUEST)
            reply = {"error": int(error)}
        else:
            raise ControlChannelError(f"unknown request {op!r} from worker {channel.index}")
        channel.send({"op": "reply", "id": message.get("id"), **reply})

    def _broadcast_change(self, name, info) -> None:
        self.broadcast({"op": "topic_deleted", "name": name} if info is None
                       else {"op": "topic", "info": topic_to_message(info)})

    def broadcast(self, message: dict) -> None:
        for channel in list(self.channels.values()):
            try:
                channel.send(message)
            except OSError as exc:
                log.info("cannot tell worker %d: %s", channel.index, exc)
                self.detach(channel.index)
