"""The control channel's wire format: length-prefixed orjson messages over a Unix socketpair.

One socketpair per worker, made before the fork. Workers ask (`create_topic`, `delete_topic`,
`allocate_producer_id`) and get one `reply` per request, in order; they also say `ready` once
they serve. The supervisor starts each worker's stream with the whole `catalog` (and the
cluster id), then broadcasts every change (`topic`, `topic_deleted`, `reload`, and in cluster
mode `fleet`: the live nodes, the controller and the nodes' dynamic configs) to every
worker. A worker that asked for a change sees the broadcast before the reply, so when its
request returns, it already follows the new catalog.

Rules: a malformed message is a bug on our side, never user input: the end that reads it
raises `ControlChannelError`, and the connection is dropped (the supervisor then restarts
that worker).
"""

from __future__ import annotations

import struct

import orjson

from appliance.controller.topics import TopicInfo

PREFIX = struct.Struct(">I")  # body length, big-endian, as Kafka frames its requests
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
    return info.to_dict()


def topic_from_message(raw: dict) -> TopicInfo:
    try:
        return TopicInfo.from_dict(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ControlChannelError(f"unreadable topic in a control message: {exc}") from None
