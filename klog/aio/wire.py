"""The asyncio client's one socket module: broker connections over asyncio streams.

The same contract as `klog.wire.Network`, in coroutines: ``await send(outgoing)`` and
``await poll(timeout_s)`` -> ``[(outgoing, response body | KlogError)]``. Each connection has a
reader task that decodes answers with the sans-IO `ClientConnection` as bytes arrive and
queues them as events; a lost connection fails its pending requests as events too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
from klog.protocol.client import NEED_DATA, ClientConnection
from klog.protocol.exceptions import ProtocolError
from klog.security import ClientSecurity, sasl_exchange
from klog.wire import MAX_FRAME_BYTES, RECV_BYTES, request_deadline

log = logging.getLogger("klog.wire")

Event = tuple[Outgoing, object]


class AIOBrokerConnection:
    """One broker connection: ``await AIOBrokerConnection.open(host, port, ...)``."""

    def __init__(self, address: str, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, client_id: str):
        self.address = address
        self.reader, self.writer = reader, writer
        self.codec = ClientConnection(client_id=client_id, max_frame_bytes=MAX_FRAME_BYTES)
        self.versions: dict[int, int] = {}
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   ssl_context: ssl.SSLContext | None = None,
                   security: ClientSecurity | None = None) -> AIOBrokerConnection:
        address = f"{host}:{port}"
        tls = {} if ssl_context is None else {"ssl": ssl_context, "server_hostname": host}
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=RECV_BYTES, **tls), timeout_s)
        except (TimeoutError, OSError) as exc:
            log.warning("cannot connect to %s: %r", address, exc)
            raise BrokerUnavailableError(f"cannot connect to {address}: {exc!r}") from None
        log.debug("connected to %s", address)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = cls(address, reader, writer, client_id)
        answer = await conn._api_versions(API_VERSIONS_VERSION, timeout_s)
        older = api_versions_retry(answer[1])
        if older is not None:  # a broker from before ApiVersions v3
            answer = await conn._api_versions(older, timeout_s)
        note_appliance_broker(address, answer[1])
        conn.versions = choose_versions(answer[1], address)
        if security is not None and security.sasl:
            await conn._authenticate(security, timeout_s)
        return conn

    async def _api_versions(self, version: int, timeout_s: float):
        self.send_raw(api_versions.SPEC.key, version, api_versions_request())
        try:
            return await asyncio.wait_for(self.next_response(), timeout_s)
        except TimeoutError:
            self.close()
            raise BrokerUnavailableError(f"{self.address}: no ApiVersions answer") from None

    async def _authenticate(self, security: ClientSecurity, timeout_s: float) -> None:
        """SASL after ApiVersions (klog/security.py); a refusal closes the connection and
        raises KafkaError."""
        steps = sasl_exchange(security, self.versions, self.address)
        try:
            step = next(steps)
            while True:
                module, version, body = step
                self.send_raw(module.SPEC.key, version, body)
                try:
                    answer = await asyncio.wait_for(self.next_response(), timeout_s)
                except TimeoutError:
                    raise BrokerUnavailableError(f"{self.address}: no SASL answer") from None
                step = steps.send(answer[1])
        except StopIteration:
            return
        except KlogError:
            self.close()
            raise

    def send_raw(self, api_key: int, version: int, body, expect_response=None) -> int:
        correlation_id, data = self.codec.send_request(api_key, version, body,
                                                       expect_response=expect_response)
        if self.closed or self.writer.is_closing():
            raise BrokerUnavailableError(f"{self.address}: connection closed")
        self.writer.write(data)
        return correlation_id

    def send(self, module, body, *, expect_response: bool = True) -> int:
        version = version_of(self.versions, module.SPEC.key, self.address)
        return self.send_raw(module.SPEC.key, version, body, expect_response)

    async def next_response(self) -> tuple[int, object]:
        """The next whole response; BrokerUnavailableError when the connection ends."""
        while True:
            try:
                event = self.codec.next_response()
            except ProtocolError as exc:
                self.close()
                raise BrokerUnavailableError(f"{self.address} sent a bad response: {exc}") from None
            if event is not NEED_DATA:
                return event
            try:
                chunk = await self.reader.read(RECV_BYTES)
            except OSError as exc:
                self.close()
                raise BrokerUnavailableError(f"{self.address}: {exc}") from None
            if not chunk:
                self.close()
                raise BrokerUnavailableError(f"{self.address} closed the connection")
            self.codec.receive_data(chunk)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.writer.close()


class AIONetwork:
    """The connections of one asyncio client, keyed by node id (None: any broker)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str, request_timeout_ms: int,
                 address_of: Callable[[int], tuple[str, int] | None],
                 ssl_context: ssl.SSLContext | None = None,
                 security: ClientSecurity | None = None):
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._ssl_context = ssl_context
        self._client_id = client_id
        self._security = security
        self._timeout_s = request_timeout_ms / 1000
        self._closing = False
        self._address_of = address_of
        self._connections: dict[tuple[int | None, str], AIOBrokerConnection] = {}
        self._pending: dict[AIOBrokerConnection, deque[tuple[int, Outgoing, float]]] = {}
        self._readers: dict[AIOBrokerConnection, asyncio.Task] = {}
        self._events: list[Event] = []
        self._ready = asyncio.Event()

    def in_flight(self) -> int:
        return sum(len(p) for p in self._pending.values())

    async def _connection(self, node: int | None, channel: str = "") -> AIOBrokerConnection:
        conn = self._connections.get((node, channel))
        if conn is not None and not conn.closed:
            return conn
        if node is None:
            conn = next((c for (_, ch), c in self._connections.items()
                         if not c.closed and ch == ""), None)
            if conn is None:
                conn = await self._connect_any()
        else:
            address = self._address_of(node)
            if address is None:
                raise BrokerUnavailableError(f"node {node} is not in the metadata")
            conn = await AIOBrokerConnection.open(*address, client_id=self._client_id,
                                                  timeout_s=self._timeout_s,
                                                  ssl_context=self._ssl_context,
                                                  security=self._security)
        self._connections[(node, channel)] = conn
        if conn not in self._pending:
            self._pending[conn] = deque()
            self._readers[conn] = asyncio.ensure_future(self._read(conn))
        return conn

    async def _connect_any(self) -> AIOBrokerConnection:
        errors = []
        for host, port in self._bootstrap:
            try:
                return await AIOBrokerConnection.open(host, port, client_id=self._client_id,
                                                      timeout_s=self._timeout_s,
                                                      ssl_context=self._ssl_context,
                                                      security=self._security)
            except BrokerUnavailableError as exc:
                errors.append(str(exc))
        raise BrokerUnavailableError("; ".join(errors))

    async def send(self, request: Outgoing) -> None:
        """Send now; a failure (or an acks=0 completion) shows up in the next poll."""
        try:
            conn = await self._connection(request.node, request.channel)
            correlation_id = conn.send(request.api, request.build_body(),
                                       expect_response=request.expect_response)
            await conn.writer.drain()
        except (KlogError, OSError) as exc:
            error = exc if isinstance(exc, KlogError) else BrokerUnavailableError(str(exc))
            self._push((request, error))
            return
        if request.expect_response:
            self._pending[conn].append((correlation_id, request,
                                        request_deadline(request, self._timeout_s)))
        else:
            self._push((request, None))

    def _push(self, event: Event) -> None:
        self._events.append(event)
        self._ready.set()

    async def _read(self, conn: AIOBrokerConnection) -> None:
        pending = self._pending[conn]
        try:
            while True:
                correlation_id, body = await conn.next_response()
                expected, request, _ = pending.popleft()
                assert expected == correlation_id, (expected, correlation_id)
                self._push((request, body))
        except BrokerUnavailableError as exc:
            self._fail_connection(conn, exc)

    def _fail_connection(self, conn: AIOBrokerConnection, error: KlogError) -> None:
        conn.close()
        lost = self._pending.get(conn, ())
        if lost and not self._closing:
            log.warning("connection to %s lost with %d request(s) in flight: %s", conn.address,
                        len(lost), error)
        else:
            log.info("connection to %s closed: %s", conn.address, error)
        for _, request, _ in self._pending.pop(conn, ()):
            self._push((request, error))
        task = self._readers.pop(conn, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for key, known in list(self._connections.items()):
            if known is conn:
                del self._connections[key]

    async def poll(self, timeout_s: float) -> list[Event]:
        """Wait up to ``timeout_s`` for answers (or a wakeup); return what happened."""
        if not self._events and timeout_s > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout_s)
        else:
            await asyncio.sleep(0)  # always yield: the readers must get their turn
        self._ready.clear()
        now = time.monotonic()
        for conn, pending in list(self._pending.items()):
            if pending and pending[0][2] <= now:
                self._fail_connection(conn, BrokerUnavailableError(
                    f"{conn.address} did not answer within {self._timeout_s:g} s "
                    "(request_timeout_ms)"))
        events, self._events = self._events, []
        return events

    def wakeup(self) -> None:
        self._ready.set()

    async def close(self) -> None:
        self._closing = True  # requests lost now are ours to drop: no warning
        for conn in list(self._pending):
            self._fail_connection(conn, BrokerUnavailableError("the client was closed"))
        self._events.clear()
        await asyncio.sleep(0)
