"""Size-prefixed framing for a reader that receives ``bytes`` (the client connection; the
broker's side receives into its own memory: ``klog.protocol.arena_frames``).

Every Kafka message is ``int32 size`` followed by ``size`` bytes. :class:`FrameBuffer` takes
bytes as they arrive and hands out whole frames as memoryviews. Its rules:

- The size prefix is checked as soon as its 4 bytes are here, before any of the frame is waited
  for: a negative size or one above ``max_frame_bytes`` raises :class:`FramingError` (the
  caller closes the connection), so a hostile peer cannot make us reserve memory it never sends.
- Zero copy in the common case: when ``receive_data`` gets a ``bytes`` object and nothing is
  pending, frames are slices of that object (which nobody can mutate). Only a frame split
  across calls is assembled in a ``bytearray`` and copied out once, so the views we hand out
  never alias a buffer we later modify.
"""

from __future__ import annotations

from typing import Any

from klog.protocol.exceptions import FramingError
from klog.protocol.primitives import INT32

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


class NeedData:
    """The type of :data:`NEED_DATA`: no whole frame is buffered yet; feed more bytes."""

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


class FrameBuffer:
    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf: bytes | bytearray = b""
        self._pos = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._pos >= len(self._buf):  # nothing pending: adopt the caller's bytes
            self._buf, self._pos = (data if type(data) is bytes else bytes(data)), 0
        elif isinstance(self._buf, bytes):  # pending tail of an adopted object: start assembling
            self._buf, self._pos = bytearray(memoryview(self._buf)[self._pos :]) + data, 0
        else:
            if self._pos:
                del self._buf[: self._pos]
                self._pos = 0
            self._buf += data

    def next_frame(self) -> memoryview | None:
        """The next whole frame's content (without the size prefix), or None if incomplete."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        size = INT32.unpack_from(buf, pos)[0]
        if not 0 <= size <= self.max_frame_bytes:
            raise FramingError(f"frame size {size} outside [0, {self.max_frame_bytes}]")
        start, end = pos + 4, pos + 4 + size
        if end > len(buf):
            return None
        self._pos = end
        return _view(buf, start, end)


    def take_partial(self, min_size: int) -> tuple[int, memoryview] | None:
        """When what is buffered is the start of one frame of at least ``min_size`` bytes,
        not all here: ``(size, the part of its content here)``, and the buffer forgets it.
        The caller then receives the rest straight into a buffer of the frame's size (one
        copy of the large part, not the two of assembling and slicing here) and hands the
        whole content to ``ClientConnection.response_of``. None otherwise (call it after
        ``next_frame`` said None: the size prefix is checked there)."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        size = INT32.unpack_from(buf, pos)[0]
        if size < min_size or pos + 4 + size <= len(buf):
            return None
        head = memoryview(buf)[pos + 4 :]
        self._buf, self._pos = b"", 0
        return size, head


def _view(buf: Any, start: int, end: int) -> memoryview:
    if isinstance(buf, bytes):
        return memoryview(buf)[start:end]
    return memoryview(buf[start:end])  # a bytearray slice is a private copy
