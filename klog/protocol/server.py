"""The server side of a Kafka connection, sans-IO: bytes in, requests out; responses in, chunks out.

The worker drives it like an h11 connection::

    conn = ServerConnection(max_frame_bytes=...)
    conn.buffer_updated(sock.recv_into(conn.get_buffer()))   # or conn.receive_data(bytes)
    while (request := conn.next_request()) is not NEED_DATA:
        if request.error is not None:
            body = error_response(request, request.error)
            if body is None: close the connection
        else:
            body = handle(request)          # e.g. produce.ProduceResponse(...)
        if request.expects_response:
            send(conn.encode_response(request, body))   # bytes and FileRegion chunks

What can go wrong, and where it surfaces:

- A size prefix that is negative or above ``max_frame_bytes``, or a frame too short to hold the
  8 fixed header bytes: :class:`FramingError` from :meth:`ServerConnection.next_request`. Nothing
  can be answered; close the connection.
- An unknown api key: ``request.error = UNSUPPORTED_VERSION``, ``spec = None``; error_response
  returns None, so the worker closes the connection, as Kafka does.
- A version outside the served range: ``error = UNSUPPORTED_VERSION``. For an advertised version
  the body is decoded too when it can be, so the error can be reported per partition.
  ApiVersions at any unsupported version gets the v0-layout answer with the api list (KIP-511).
- A body that does not decode (truncated, bytes left over, bad lengths or counts, bad UTF-8):
  ``error = INVALID_REQUEST``, ``body = None``, and ``request.detail`` says why.

Responses leave in request order; that is the caller's job (the codec keeps no response queue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from klog.protocol.apis import API_BY_KEY, ApiSpec, api_versions_response
from klog.protocol.arena_frames import ArenaFrameBuffer
from klog.protocol.chunks import Chunk, ChunkWriter
from klog.protocol.codec import encode_message
from klog.protocol.error_codes import ErrorCode
from klog.protocol.exceptions import DecodeError, EncodeError, FramingError, ProtocolError
from klog.protocol.frames import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, NeedData
from klog.protocol.headers import (
    API_VERSIONS_KEY,
    REQUEST_HEADER_FIXED,
    RequestHeader,
    read_request_header,
    response_header_version,
    write_response_header,
)

__all__ = [
    "NEED_DATA",
    "FramingError",
    "NeedData",
    "ProtocolError",
    "Request",
    "ServerConnection",
    "encode_response",
    "error_response",
    "parse_request",
]

PRODUCE_KEY = 0
ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for a connection without authentication


@dataclass(slots=True)
class Request:
    """One decoded request. ``error`` is set when it cannot be served as is (see the module
    docstring); ``body`` is the decoded message (attribute access, snake_case names) or None."""

    header: RequestHeader
    body: Any
    error: ErrorCode | None
    spec: ApiSpec | None
    detail: str | None = None  # why decoding failed, for the log
    client_host: str = ""  # the peer's address, set by the server's I/O layer (DescribeGroups)
    principal: str = ANONYMOUS  # who sent it: User:<name> after SASL, the certificate's on TLS
    listener: str = ""  # the name of the server's listener it came in on ("" if not told)
    handler_ns: int = 0  # time its handler ran on the loop (client quotas' request_percentage)
    fetch_sessions: Any = None  # its connection's KIP-227 sessions (opaque here: the server's)

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def expects_response(self) -> bool:
        """False only for a Produce with ``acks = 0``: the client waits for nothing, not even
        an error (Kafka closes the connection to report one)."""
        return not (self.api_key == PRODUCE_KEY and self.body is not None and self.body.acks == 0)


def parse_request(frame: Any) -> Request:
    """Decode one frame's content (without its size prefix). Raises FramingError only when the
    frame is too short to carry a correlation id; every other problem is ``request.error``."""
    if len(frame) < REQUEST_HEADER_FIXED.size:
        raise FramingError(f"request of {len(frame)} bytes is too short for a header")
    spec = API_BY_KEY.get(REQUEST_HEADER_FIXED.unpack_from(frame, 0)[0])
    try:
        header, pos = read_request_header(frame)
    except DecodeError as exc:
        header = RequestHeader(*REQUEST_HEADER_FIXED.unpack_from(frame, 0))
        return Request(header, None, ErrorCode.INVALID_REQUEST, spec, f"header: {exc}")
    if spec is None:
        return Request(header, None, ErrorCode.UNSUPPORTED_VERSION, None, "unknown api key")
    body, error, detail = None, None, None
    if header.api_version in spec.request.versions:
        try:
            body = spec.request.decode(frame[pos:], header.api_version)
        except DecodeError as exc:
            error, detail = ErrorCode.INVALID_REQUEST, str(exc)
    if not spec.serves(header.api_version):
        error = ErrorCode.UNSUPPORTED_VERSION
        detail = f"{spec.name} v{header.api_version} not served (serving {spec.served})"
    return Request(header, body, error, spec, detail)


class ServerConnection:
    """One client connection, broker side. Holds only the receive buffer."""

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._frames = ArenaFrameBuffer(max_frame_bytes)

    @property
    def buffered_bytes(self) -> int:
        return self._frames.buffered_bytes

    def get_buffer(self) -> memoryview:
        """Where to receive the next bytes (``recv_into``): one copy of a request's records,
        the kernel's, before the log's own (klog.protocol.arena_frames)."""
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._frames.buffer_updated(nbytes)

    def receive_data(self, data: bytes) -> None:
        self._frames.receive_data(data)

    def next_request(self) -> Request | NeedData:
        """The next request, or NEED_DATA. Raises FramingError (close the connection)."""
        frame = self._frames.next_frame()
        if frame is None:
            return NEED_DATA
        return parse_request(frame)

    def encode_response(self, request: Request, body: Any) -> list[Chunk]:
        """Frame ``body`` as the response to ``request``: size prefix, the header version that
        goes with the request's (api, version), then the body at that version. Raises
        EncodeError if the body does not fit the schema or the request cannot be answered."""
        return encode_response(request, body)


def encode_response(request: Request, body: Any) -> list[Chunk]:
    """See :meth:`ServerConnection.encode_response`."""
    spec = request.spec
    if spec is None:
        raise EncodeError(f"api key {request.api_key} is unknown: close the connection instead")
    version = _response_version(request)
    out = ChunkWriter()
    write_response_header(out, request.correlation_id, response_header_version(spec.key, version))
    encode_message(spec.response, body, out, version)
    return out.finish()


def _response_version(request: Request) -> int:
    """The request's version, except that ApiVersions at a version we do not serve is answered
    in the v0 layout, which every client can read."""
    spec = request.spec
    assert spec is not None
    if spec.key == API_VERSIONS_KEY and not spec.serves(request.api_version):
        return 0
    return request.api_version


def error_response(request: Request, error_code: ErrorCode | int) -> Any:
    """The smallest valid response body carrying ``error_code`` for this request, or None when
    the request's (api, version) cannot carry one: the caller then closes the connection.

    ApiVersions always gets an answer listing our APIs. Other APIs put the code in their
    top-level error field, or in every partition/topic/group of the request when the body
    was decoded; a request at a version we have no declaration for gets None.
    """
    spec = request.spec
    if spec is None:
        return None
    if spec.key == API_VERSIONS_KEY:
        return api_versions_response(int(error_code))
    if request.api_version not in spec.response.versions:
        return None
    return spec.error_response(request.body, request.api_version, int(error_code))
