"""The client side of a Kafka connection, sans-IO: requests in, bytes out; bytes in, responses out.

Kafka responses carry only a correlation id, not their api or version, so the client must
remember what it asked: an in-flight queue of (correlation id, api, version), answered strictly
in order (Kafka guarantees FIFO per connection). A Produce with ``acks = 0`` gets no response
at all, so it is not queued.

What can go wrong: an oversized or negative size prefix raises :class:`FramingError`; a
response whose correlation id is not the oldest in flight raises :class:`CorrelationError`; a
body that does not decode raises :class:`DecodeError`. All are :class:`ProtocolError`s after
which the connection is unusable: close it.

ApiVersions quirk (KIP-511): a broker answers an ApiVersions request at a version it does not
support in the v0 layout with UNSUPPORTED_VERSION, whatever version was asked; we decode such an
answer as v0, and the caller retries with a version from its api list.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from klog.protocol.apis import API_BY_KEY, ApiSpec
from klog.protocol.chunks import ChunkWriter, join_chunks
from klog.protocol.codec import encode_message
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import CorrelationError, EncodeError, ProtocolError
from klog.protocol.frames import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameBuffer, NeedData
from klog.protocol.headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    read_response_header,
    response_header_version,
    write_request_header,
)
from klog.protocol.primitives import INT16

__all__ = ["NEED_DATA", "ClientConnection", "NeedData", "ProtocolError"]

PRODUCE_KEY = 0
_MAX_CORRELATION_ID = 0x7FFFFFFF


class ClientConnection:
    """One connection to one broker, client side."""

    def __init__(
        self, *, client_id: str | None = "klog", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    ) -> None:
        self.client_id = client_id
        self._frames = FrameBuffer(max_frame_bytes)
        self._in_flight: deque[tuple[int, ApiSpec, int]] = deque()
        self._next_correlation_id = 0

    @property
    def in_flight(self) -> int:
        """Requests sent whose responses have not been returned by next_response yet."""
        return len(self._in_flight)

    def send_request(
        self, api_key: int, version: int, body: Any, *, expect_response: bool | None = None
    ) -> tuple[int, bytes]:
        """Encode a request; returns its correlation id and the bytes to write.

        ``expect_response`` defaults to False for a Produce with ``acks = 0`` and True
        otherwise. Raises EncodeError for an unknown api, an undeclared version or a body
        that does not fit the schema (nothing is queued then).
        """
        correlation_id, chunks = self.send_request_chunks(api_key, version, body,
                                                          expect_response=expect_response)
        return correlation_id, join_chunks(chunks)

    def send_request_chunks(
        self, api_key: int, version: int, body: Any, *, expect_response: bool | None = None
    ) -> tuple[int, list[bytes | bytearray | memoryview]]:
        """As :meth:`send_request`, the bytes as the encoder left them: a large records
        value is its own chunk, for a writer that sends the pieces without joining them
        (``socket.sendmsg``), which saves a copy of a producer's batches."""
        spec = API_BY_KEY.get(api_key)
        if spec is None:
            raise EncodeError(f"unknown api key {api_key}")
        correlation_id = self._next_correlation_id
        out = ChunkWriter()
        write_request_header(out, RequestHeader(api_key, version, correlation_id, self.client_id))
        encode_message(spec.request, body, out, version)
        data = out.finish()
        self._next_correlation_id = (correlation_id + 1) & _MAX_CORRELATION_ID
        if expect_response is None:
            expect_response = not (api_key == PRODUCE_KEY and body.acks == 0)
        if expect_response:
            self._in_flight.append((correlation_id, spec, version))
        return correlation_id, data

    def receive_data(self, data: bytes) -> None:
        self._frames.receive_data(data)

    def take_partial_frame(self, min_size: int):
        """``FrameBuffer.take_partial``: a large response's start, to finish receiving it
        into its own buffer and hand it to ``response_of``."""
        return self._frames.take_partial(min_size)

    def next_response(self) -> tuple[int, Any] | NeedData:
        """``(correlation_id, decoded body)`` of the oldest request in flight, or NEED_DATA.
        Raises a ProtocolError subclass (see the module docstring)."""
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        return self.response_of(frame)

    def response_of(self, frame) -> tuple[int, Any]:
        """``next_response`` for a whole frame (its content, without the size prefix) that the
        caller framed itself, e.g. received straight into a buffer of the frame's size. The
        decoded body may keep views of ``frame``: do not reuse it. Raises as next_response."""
        if not self._in_flight:
            raise CorrelationError("received a response while no request is in flight")
        expected, spec, version = self._in_flight[0]
        header_version = response_header_version(spec.key, version)
        correlation_id, pos = read_response_header(frame, header_version)
        if correlation_id != expected:
            raise CorrelationError(f"response has correlation id {correlation_id}, "
                                   f"expected {expected} ({spec.name} v{version})")  # fmt: skip
        self._in_flight.popleft()
        body = frame[pos:]
        if spec.key == API_VERSIONS_KEY and _is_unsupported_version(body):
            version = 0
        return correlation_id, spec.response.decode(body, version)


def _is_unsupported_version(body: Any) -> bool:
    return len(body) >= 2 and INT16.unpack_from(body, 0)[0] == ErrorCode.UNSUPPORTED_VERSION
