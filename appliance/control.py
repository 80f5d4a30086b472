"""The control channel between the supervisor (the appliance's controller) and its workers.

One Unix stream socketpair per worker, made before the fork. Messages are orjson objects
behind a 4-byte length prefix. Workers ask (`create_topic`, `delete_topic`,
`allocate_producer_id`) and get one reply per request, in order; they also say `ready` once
they serve. The supervisor broadcasts every catalog change (`topic`, `topic_deleted`) to every
worker, and starts each worker's stream with the whole `catalog`. A worker that asked for a
change sees the broadcast before the reply, so when its request returns, it already follows
the new catalog.

Rules: a malformed message is a bug on our side, never user input: it is logged and the
connection is dropped (the supervisor then restarts that worker).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import orjson

from appliance.catalog import TopicInfo
from appliance.controller import TopicResult
from klog.protocol.errors import ErrorCode

PREFIX = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ControlChannelError(ConnectionError):
    """The other end of the control channel is gone or sent something unreadable."""


def encode(message: dict) -> bytes:
    body = orjson.dumps(message)
    return PREFIX.pack(len(body)) + body


class MessageReader:
    """Splits a byte stream into messages (sans-IO: feed bytes, take messages)."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def messages(self):
        while len(self._buffer) >= PREFIX.size:
            (size,) = PREFIX.unpack_from(self._buffer)
            if size > MAX_MESSAGE_BYTES:
                raise ControlChannelError(f"control message of {size} bytes is too large")
            if len(self._buffer) < PREFIX.size + size:
                return
            body = bytes(self._buffer[PREFIX.size : PREFIX.size + size])
            del self._buffer[: PREFIX.size + size]
            try:
                yield orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ControlChannelError(f"unreadable control message: {exc}") from None


def topic_to_message(info: TopicInfo) -> dict:
    return {"name": info.name, "owners": list(info.owners), "configs": info.configs,
            "internal": info.internal}


def topic_from_message(raw: dict) -> TopicInfo:
    return TopicInfo(name=raw["name"], owners=tuple(raw["owners"]), configs=raw["configs"],
                     internal=raw["internal"])


class ControllerClient:
    """A worker's view of the supervisor's controller, with LocalController's interface.

    Requests block the worker's loop for one round trip over a Unix socket (tens of µs):
    they happen on topic creation and producer start, never on the produce or fetch path.
    Broadcasts are applied as they arrive, both while waiting for a reply and when the event
    loop reports the socket readable (`pump`).
    """

    def __init__(self, sock: socket.socket, *, defaults, default_partitions: int):
        self.sock = sock
        self.defaults = defaults
        self.default_partitions = default_partitions
        self._reader = MessageReader()
        self._topics: dict[str, TopicInfo] = {}
        self._listeners: list[Callable[[str, TopicInfo | None], None]] = []
        self._reload_listeners: list[Callable[[dict], None]] = []
        self._replies: list[dict] = []
        self._next_id = 0

    # LocalController's interface ---------------------------------------------------------

    def add_listener(self, listener) -> None:
        self._listeners.append(listener)

    def add_reload_listener(self, listener: Callable[[dict], None]) -> None:
        """`listener(settings)` runs when the supervisor reloaded its config (SIGHUP)."""
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

    def allocate_producer_id(self) -> int:
        return self._request({"op": "allocate_producer_id"})["producer_id"]

    # plumbing ----------------------------------------------------------------------------

    def tell(self, message: dict) -> None:
        """Send a message that needs no reply (e.g. `ready`)."""
        try:
            self.sock.sendall(encode(message))
        except OSError as exc:
            raise ControlChannelError(f"supervisor is gone: {exc}") from None

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
            while not getattr(self, "_has_catalog", False):
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
            self._replies.append(message)
        elif op == "catalog":
            self._topics = {t["name"]: topic_from_message(t) for t in message["topics"]}
            self._has_catalog = True
        elif op == "topic":
            info = topic_from_message(message["info"])
            self._topics[info.name] = info
            for listener in self._listeners:
                listener(info.name, info)
        elif op == "reload":
            self.defaults = type(self.defaults).from_kafka(message["log_defaults"])
            self.default_partitions = message["num_partitions"]
            for listener in self._reload_listeners:
                listener(message)
        elif op == "topic_deleted":
            self._topics.pop(message["name"], None)
            for listener in self._listeners:
                listener(message["name"], None)
        else:
            raise ControlChannelError(f"unknown control message {op!r}")
