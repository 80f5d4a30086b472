"""The worker's end of the control channel: the `Controller` a worker holds.

Requests block the worker's loop for one round trip over a Unix socket (tens of µs): they
happen on topic creation and producer start, never on the produce or fetch path. An ISR
change is the exception that does not block: its answer depends on a ZooKeeper write, so it
is sent at once and answered through a callback. Broadcasts and such answers are applied as
they arrive, both while waiting for a reply and when the event loop reports the socket
readable (`pump`). The message vocabulary is in `appliance.controller.channel`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from appliance.controller.channel import (
    ControlChannelError,
    MessageReader,
    encode,
    topic_from_message,
)
from appliance.controller.interface import ReloadListener, TopicListener
from appliance.controller.topics import FleetNode, TopicInfo, TopicResult
from appliance.segments.config import LogConfig
from klog.protocol.error_codes import ErrorCode


class ControllerClient:
    """Implements `appliance.controller.interface.Controller` over the control channel."""

    def __init__(self, sock: socket.socket, *, defaults: LogConfig, default_partitions: int):
        self.sock = sock
        self.defaults = defaults
        self.default_partitions = default_partitions
        self.cluster_id = ""
        self.fleet_nodes: dict[int, FleetNode] | None = None
        self.fleet_controller_id = -1
        self.fleet_node_configs: dict[int, dict[str, str]] = {}
        self._has_catalog = False
        self._reader = MessageReader()
        self._topics: dict[str, TopicInfo] = {}
        self._listeners: list[TopicListener] = []
        self._reload_listeners: list[ReloadListener] = []
        self._replies: list[dict] = []
        self._callbacks: dict[int, Callable[[dict], None]] = {}  # request id -> on_reply
        self._next_id = 0

    # the Controller interface ------------------------------------------------------------

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def add_reload_listener(self, listener: ReloadListener) -> None:
        self._reload_listeners.append(listener)

    def topics(self) -> list[TopicInfo]:
        return list(self._topics.values())

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def create_topic(self, name, partitions=-1, replication_factor=-1, configs=None, *,
                     validate_only=False) -> TopicResult:
        reply = self._request({"op": "create_topic", "name": name, "partitions": partitions,
                               "replication_factor": replication_factor,
                               "configs": configs or {}, "validate_only": validate_only})
        return TopicResult(name, ErrorCode(reply["error"]), reply.get("message"))

    def delete_topic(self, name: str) -> TopicResult:
        reply = self._request({"op": "delete_topic", "name": name})
        return TopicResult(name, ErrorCode(reply["error"]), reply.get("message"))

    def create_partitions(self, name: str, count: int, *,
                          validate_only: bool = False) -> TopicResult:
        reply = self._request({"op": "create_partitions", "name": name, "count": count,
                               "validate_only": validate_only})
        return TopicResult(name, ErrorCode(reply["error"]), reply.get("message"))

    def allocate_producer_id(self) -> int:
        return self._request({"op": "allocate_producer_id"})["producer_id"]

    def alter_isr(self, topic: str, partition: int, leader_epoch: int, isr: list[int],
                  on_done: Callable[[ErrorCode], None]) -> None:
        self._send_request({"op": "alter_isr", "topic": topic, "partition": partition,
                            "leader_epoch": leader_epoch, "isr": list(isr)},
                           lambda reply: on_done(ErrorCode(reply["error"])))

    # plumbing ----------------------------------------------------------------------------

    def tell(self, message: dict) -> None:
        """Send a message (a request, or `ready` that needs no reply). Whole, even on the
        loop's non-blocking socket: a part sent alone would garble the channel."""
        blocking = self.sock.getblocking()
        self.sock.setblocking(True)
        try:
            self.sock.sendall(encode(message))
        except OSError as exc:
            raise ControlChannelError(f"supervisor is gone: {exc}") from None
        finally:
            self.sock.setblocking(blocking)

    def _send_request(self, message: dict, on_reply: Callable[[dict], None]) -> None:
        """Send a request without waiting: `on_reply(reply)` runs when its reply is read,
        by `pump` or while a later blocking request waits for its own."""
        self._next_id += 1
        message["id"] = self._next_id
        self._callbacks[self._next_id] = on_reply
        self.tell(message)

    def _request(self, message: dict) -> dict:
        self._next_id += 1
        message["id"] = self._next_id
        self.tell(message)
        self.sock.setblocking(True)
        try:
            while not self._replies:
                self._receive_blocking()
        finally:
            self.sock.setblocking(False)
        reply = self._replies.pop(0)
        if reply.get("id") != message["id"]:
            raise ControlChannelError(f"reply {reply.get('id')} to request {message['id']}")
        return reply

    def _receive_blocking(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ControlChannelError("supervisor closed the control channel")
        self._consume(data)

    def pump(self) -> None:
        """Read what has arrived without blocking (the event loop's reader callback)."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
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
            self._apply(message)

    def _apply(self, message: dict) -> None:
        op = message.get("op")
        if op == "reply":
            callback = self._callbacks.pop(message.get("id"), None)
            if callback is not None:
                callback(message)
            else:
                self._replies.append(message)
        elif op == "catalog":
            self._topics = {t["name"]: topic_from_message(t) for t in message["topics"]}
            self.cluster_id = message["cluster_id"]
            self._has_catalog = True
        elif op == "topic":
            info = topic_from_message(message["info"])
            self._topics[info.name] = info
            for listener in self._listeners:
                listener(info.name, info)
        elif op == "reload":
            self.defaults = LogConfig.from_kafka(message["log_defaults"])
            self.default_partitions = message["num_partitions"]
            for listener in self._reload_listeners:
                listener(message)
        elif op == "fleet":
            self.fleet_nodes = {n[0]: FleetNode(*n) for n in message["nodes"]}
            self.fleet_controller_id = message["controller_id"]
            self.fleet_node_configs = {n: c for n, c in message.get("node_configs", ())}
        elif op == "topic_deleted":
            self._topics.pop(message["name"], None)
            for listener in self._listeners:
                listener(message["name"], None)
        else:
            raise ControlChannelError(f"unknown control message {op!r}")
