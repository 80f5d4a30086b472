"""The blocking client's one socket module: connections to brokers, and a selector over them.

All protocol state (correlation ids, the in-flight queue, framing limits) lives in the sans-IO
`ClientConnection`; this module only moves its bytes. :class:`BrokerConnection` negotiates
API versions once (ApiVersions, as every Kafka client does) and then either answers one
request at a time (:meth:`~BrokerConnection.request`, for Admin) or pipelines them
(:meth:`~BrokerConnection.send` + :meth:`~BrokerConnection.read_responses`). :class:`Network`
multiplexes the connections of one producer or consumer with a selector: it sends the
:class:`~klog.outgoing.Outgoing` requests of a protocol object and returns ``(outgoing,
answer)`` events, where the answer is the response body or the exception that lost it (a
closed connection, a refused connect, ``request_timeout_ms`` without an answer).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable

from klog.config import parse_bootstrap
from klog.errors import BrokerUnavailableError, KlogError
from klog.metadata import note_appliance_broker
from klog.outgoing import (
    API_VERSIONS_VERSION,
    Outgoing,
    api_versions_request,
    api_versions_retry,
    choose_versions,
    version_of,
)
from klog.protocol.apis import api_versions
from klog.protocol.chunks import join_chunks
from klog.protocol.client import NEED_DATA, ClientConnection
from klog.protocol.exceptions import ProtocolError
from klog.security import ClientSecurity, sasl_exchange

__all__ = ["BrokerConnection", "Network", "connect_any", "parse_bootstrap"]

log = logging.getLogger(__name__)

RECV_BYTES = 1 << 20
MAX_GATHER = 512  # chunks to one sendmsg (the kernel's IOV_MAX is 1024)
LARGE_FRAME_BYTES = 64 * 1024  # received into a buffer of their own (read_responses)
MAX_FRAME_BYTES = 256 * 1024 * 1024  # a Fetch can carry fetch_max_bytes (50 MiB by default)


class BrokerConnection:
    """A connection to one broker; not thread-safe. Raises BrokerUnavailableError when the
    broker cannot be reached or the connection breaks (it is closed then)."""

    def __init__(self, host: str, port: int, *, client_id: str = "klog",
                 timeout_s: float = 30.0, ssl_context: ssl.SSLContext | None = None,
                 security: ClientSecurity | None = None):
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
            if ssl_context is not None:
                self.sock = _handshake(self.sock, ssl_context, host)
        except OSError as exc:
            log.warning("cannot connect to %s: %s", self.address, exc)
            raise BrokerUnavailableError(f"cannot connect to {self.address}: {exc}") from None
        log.debug("connected to %s", self.address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.codec = ClientConnection(client_id=client_id, max_frame_bytes=MAX_FRAME_BYTES)
        self._large: bytearray | None = None  # a large response being received (read_responses)
        self._large_got = 0
        self.closed = False
        self.versions = self._negotiate()
        if security is not None and security.sasl:
            self._authenticate(security)

    def _negotiate(self) -> dict[int, int]:
        answer = self.request(api_versions.SPEC.key, API_VERSIONS_VERSION,
                              api_versions_request())
        older = api_versions_retry(answer)
        if older is not None:  # a broker from before ApiVersions v3
            answer = self.request(api_versions.SPEC.key, older, api_versions_request())
        note_appliance_broker(self.address, answer)
        return choose_versions(answer, self.address)

    def _authenticate(self, security: ClientSecurity) -> None:
        """SASL after ApiVersions (klog/security.py); a refusal closes the connection and
        raises KafkaError."""
        steps = sasl_exchange(security, self.versions, self.address)
        try:
            step = next(steps)
            while True:
                module, version, body = step
                step = steps.send(self.request(module.SPEC.key, version, body))
        except StopIteration:
            return
        except KlogError:
            self.close()
            raise

    def version_of(self, api_key: int) -> int:
        return version_of(self.versions, api_key, self.address)

    def request(self, api_key: int, version: int, body):
        """Send one request and wait for its response body."""
        self._write(self.codec.send_request(api_key, version, body)[1])
        while True:
            responses = self.read_responses()
            if responses:
                return responses[0][1]

    def call(self, module, **fields):
        """Build `module.Request(**fields)` at the negotiated version and return the answer."""
        return self.request(module.SPEC.key, self.version_of(module.SPEC.key),
                            module.Request(**fields))

    def send(self, module, body, *, expect_response: bool = True) -> int:
        """Write one request at the negotiated version; returns its correlation id."""
        correlation_id, chunks = self.codec.send_request_chunks(
            module.SPEC.key, self.version_of(module.SPEC.key), body,
            expect_response=expect_response)
        if len(chunks) == 1:
            self._write(chunks[0])
        elif isinstance(self.sock, ssl.SSLSocket) or len(chunks) > MAX_GATHER:
            self._write(join_chunks(chunks))
        else:
            self._write_gathered(chunks)
        return correlation_id

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: {exc}") from None

    def _write_gathered(self, chunks: list) -> None:
        """Send the chunks with ``sendmsg`` (the socket's timeout applies to each call),
        without joining a batch into a copy of the whole request first."""
        views = [memoryview(chunk) for chunk in chunks]
        try:
            while views:
                sent = self.sock.sendmsg(views)
                while views and sent >= views[0].nbytes:
                    sent -= views.pop(0).nbytes
                if sent:
                    views[0] = views[0][sent:]
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: {exc}") from None

    def read_responses(self) -> list[tuple[int, object]]:
        """Receive once (blocking up to the socket timeout) and return the whole responses.

        A response of LARGE_FRAME_BYTES or more (a consumer's fetch, a megabyte) is received
        straight into a buffer of its size once its size prefix is here: assembling it in
        the frame buffer from RECV_BYTES pieces, then copying it out, cost a fifth of a
        consumer's CPU."""
        if self._large is not None:
            return self._read_large()
        try:
            chunk = self.sock.recv(RECV_BYTES)
            # TLS: recv returns one record; decrypted bytes left inside the SSL object would
            # not wake the selector, so take them now
            while chunk and isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
                chunk += self.sock.recv(self.sock.pending())
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: {exc}") from None
        if not chunk:
            self.close()
            raise BrokerUnavailableError(f"{self.address} closed the connection")
        return self._take(chunk)

    def _take(self, chunk) -> list[tuple[int, object]]:
        self.codec.receive_data(chunk)
        responses = []
        try:
            while (event := self.codec.next_response()) is not NEED_DATA:
                responses.append(event)
        except ProtocolError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address} sent a bad response: {exc}") from None
        partial = self.codec.take_partial_frame(LARGE_FRAME_BYTES)
        if partial is not None:
            size, head = partial
            self._large = bytearray(size)
            self._large[: len(head)] = head
            self._large_got = len(head)
        return responses

    def _read_large(self) -> list[tuple[int, object]]:
        """Receive more of the large response under way (read_responses)."""
        frame = memoryview(self._large)
        try:
            got = self.sock.recv_into(frame[self._large_got :])
            while (got and self._large_got + got < len(frame)
                   and isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()):
                got += self.sock.recv_into(frame[self._large_got + got :])
        except OSError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: {exc}") from None
        if not got:
            self.close()
            raise BrokerUnavailableError(f"{self.address} closed the connection")
        self._large_got += got
        if self._large_got < len(frame):
            return []
        self._large = None
        try:
            responses = [self.codec.response_of(frame)]
        except ProtocolError as exc:
            self.close()
            raise BrokerUnavailableError(f"{self.address} sent a bad response: {exc}") from None
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            try:  # decrypted bytes past the frame would not wake the selector
                responses += self._take(self.sock.recv(self.sock.pending()))
            except OSError as exc:
                self.close()
                raise BrokerUnavailableError(f"{self.address}: {exc}") from None
        return responses

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


def _handshake(sock: socket.socket, context: ssl.SSLContext, host: str) -> ssl.SSLSocket:
    """TLS over a connected socket, verifying the broker's certificate (and its name when
    the context checks hostnames); closes the socket if the handshake fails."""
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except OSError:
        sock.close()
        raise


def connect_any(servers: str, **kwargs) -> BrokerConnection:
    """Connect to the first bootstrap server that answers."""
    errors = []
    for host, port in parse_bootstrap(servers):
        try:
            return BrokerConnection(host, port, **kwargs)
        except BrokerUnavailableError as exc:
            errors.append(str(exc))
    raise BrokerUnavailableError("; ".join(errors))


Event = tuple[Outgoing, object]  # (request, response body | KlogError)


def request_deadline(request: Outgoing, default_s: float) -> float:
    """When an unanswered ``request`` counts as lost: its own timeout_ms, or the client's."""
    timeout_s = default_s if request.timeout_ms is None else request.timeout_ms / 1000
    return time.monotonic() + timeout_s


class Network:
    """The connections of one client, keyed by node id (``None``: any broker). Used by one
    thread at a time; :meth:`wakeup` is the only method other threads may call."""

    def __init__(self, bootstrap_servers: str, *, client_id: str, request_timeout_ms: int,
                 address_of: Callable[[int], tuple[str, int] | None],
                 ssl_context: ssl.SSLContext | None = None,
                 security: ClientSecurity | None = None):
        self._bootstrap = bootstrap_servers
        self.ssl_context = ssl_context
        self._client_id = client_id
        self._security = security
        self._timeout_s = request_timeout_ms / 1000
        self._closing = False
        self._address_of = address_of
        self._connections: dict[tuple[int | None, str], BrokerConnection] = {}
        self._pending: dict[BrokerConnection, deque[tuple[int, Outgoing, float]]] = {}
        self._events: list[Event] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._woken = False

    def in_flight(self) -> int:
        return sum(len(p) for p in self._pending.values())

    def _connection(self, node: int | None, channel: str = "") -> BrokerConnection:
        conn = self._connections.get((node, channel))
        if conn is not None and not conn.closed:
            return conn
        if node is None:
            conn = next((c for (_, ch), c in self._connections.items()
                         if not c.closed and ch == ""), None)
            if conn is None:
                conn = connect_any(self._bootstrap, client_id=self._client_id,
                                   timeout_s=self._timeout_s, ssl_context=self.ssl_context,
                                   security=self._security)
        else:
            address = self._address_of(node)
            if address is None:
                raise BrokerUnavailableError(f"node {node} is not in the metadata")
            conn = BrokerConnection(*address, client_id=self._client_id,
                                    timeout_s=self._timeout_s, ssl_context=self.ssl_context,
                                    security=self._security)
        self._connections[(node, channel)] = conn
        if conn not in self._pending:
            self._pending[conn] = deque()
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        return conn

    def send(self, request: Outgoing) -> None:
        """Send now; a failure (or an acks=0 completion) shows up in the next poll."""
        try:
            conn = self._connection(request.node, request.channel)
            correlation_id = conn.send(request.api, request.build_body(),
                                       expect_response=request.expect_response)
        except KlogError as exc:
            self._drop_closed()
            self._events.append((request, exc))
            return
        if request.expect_response:
            self._pending[conn].append((correlation_id, request,
                                        request_deadline(request, self._timeout_s)))
        else:
            self._events.append((request, None))

    def poll(self, timeout_s: float) -> list[Event]:
        """Wait up to ``timeout_s`` for answers (or a wakeup); return what happened."""
        if not self._events:
            for key, _ in self._selector.select(max(timeout_s, 0)):
                conn = key.data
                if conn is None:
                    self._drain_wakeups()
                elif not conn.closed:
                    self._receive(conn)
        self._expire(time.monotonic())
        events, self._events = self._events, []
        return events

    def _receive(self, conn: BrokerConnection) -> None:
        pending = self._pending[conn]
        try:
            for correlation_id, body in conn.read_responses():
                expected, request, _ = pending.popleft()
                assert expected == correlation_id, (expected, correlation_id)
                self._events.append((request, body))
        except BrokerUnavailableError as exc:
            self._fail_connection(conn, exc)

    def _fail_connection(self, conn: BrokerConnection, error: KlogError) -> None:
        conn.close()
        lost = self._pending.get(conn, ())
        if lost and not self._closing:
            log.warning("connection to %s lost with %d request(s) in flight: %s", conn.address,
                        len(lost), error)
        else:
            log.info("connection to %s closed: %s", conn.address, error)
        for _, request, _ in self._pending.pop(conn, ()):
            self._events.append((request, error))
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        for key, known in list(self._connections.items()):
            if known is conn:
                del self._connections[key]

    def _drop_closed(self) -> None:
        for conn in [c for c in self._pending if c.closed]:
            self._fail_connection(conn, BrokerUnavailableError(f"{conn.address} closed"))

    def _expire(self, now: float) -> None:
        for conn, pending in list(self._pending.items()):
            if pending and pending[0][2] <= now:
                self._fail_connection(conn, BrokerUnavailableError(
                    f"{conn.address} did not answer within {self._timeout_s:g} s "
                    "(request_timeout_ms)"))

    def wakeup(self) -> None:
        """Make a blocked :meth:`poll` return (thread-safe, cheap when already woken)."""
        if not self._woken:
            self._woken = True
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def _drain_wakeups(self) -> None:
        """Empty the pipe, then clear the flag. Cleared first, a wakeup in between set it,
        sent its byte, and the drain swallowed the byte: every later wakeup was then skipped
        (the flag stuck) and the sender slept out its whole timeout with a batch queued
        (75-105 s in half the runs of test_fast_send's threads). A wakeup skipped before
        the clear is safe: the caller changed its state first, and the loop reads it after
        this returns."""
        with contextlib.suppress(OSError):
            while self._wake_r.recv(4096):
                pass
        self._woken = False

    def close(self) -> None:
        self._closing = True  # requests lost now are ours to drop: no warning
        for conn in list(self._pending):
            self._fail_connection(conn, BrokerUnavailableError("the client was closed"))
        self._events.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
