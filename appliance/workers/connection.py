"""One client connection: bytes to requests, requests to handlers, responses back in order.

The codec is the sans-IO `ServerConnection`; this module is the only place that touches the
transport. Kafka promises responses in request order per connection (librdkafka pipelines
requests), so answers queue behind the oldest unanswered request. Handlers answer at once with
a body, or later through an awaitable (a long-polling fetch, an acks=all produce waiting for
group commit). Record bytes of fetch responses arrive as `FileRegion` chunks and leave with
sendfile, straight from the segment file: at once when the socket takes them
(`direct_send.py`), the rest through `loop.sendfile`. Reading pauses while too many responses are
pending, or while the transport's write buffer is above its high-water mark (a client that
does not read its answers), so one client cannot make the worker buffer without bound: what a
connection holds is at most one partial request (up to `socket.request.max.bytes`), the
requests of one read, and responses up to the write high-water mark plus the ones in flight.
Admission (`max.connections`, `max.connections.per.ip`) and the idle timeout are the
`ConnectionGuard`'s decisions (`appliance.workers.connection_limits`). On a SASL listener,
every request goes to the connection's `Authenticator` (`appliance.workers.authentication`)
until it succeeds; after that each request carries the connection's principal.
Client quotas (`appliance.workers.client_quotas`): an answer over a quota carries its
throttle time, and the connection reads nothing more until that time is over (KIP-219).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import time
from collections import deque

from appliance.tls.fetch_writer import ShortRead, write_through_tls
from appliance.tls.principal import ANONYMOUS, principal_of
from appliance.workers.authentication import Action
from appliance.workers.direct_send import ShortFile, send_now
from appliance.workers.fetch_sessions import FetchSessions
from klog.protocol.chunks import FileRegion
from klog.protocol.error_codes import ErrorCode
from klog.protocol.server import NEED_DATA, ProtocolError, ServerConnection, error_response

log = logging.getLogger(__name__)

MAX_PENDING_RESPONSES = 128
WRITE_BUFFER_HIGH_BYTES = 1 << 20  # above this, stop reading the client's requests
NO_RESPONSE = object()  # a handler's answer when Kafka sends none (Produce with acks=0)


class _Fd:
    """The file object `loop.sendfile` wants, around a descriptor the worker keeps open."""

    __slots__ = ("_fd",)
    mode = "rb"

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _resolve(future: asyncio.Future, body) -> None:
    if not future.done():
        future.set_result(body)


class KafkaConnection(asyncio.BufferedProtocol):
    """The asyncio protocol of one client connection to a worker. A buffered protocol: the
    transport receives straight into the codec's memory (``get_buffer``), so a produce
    request's records are copied once, by the kernel, before the log's write."""

    def __init__(self, worker, listener=None):
        self.worker = worker
        # the listener it came in on (appliance.listeners.Listener; None: the first one)
        self.listener = listener
        self.listener_name = listener.name if listener is not None else ""
        self.codec = ServerConnection(max_frame_bytes=worker.config.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_host = ""
        self._queue: deque = deque()  # (request, body | Future, monotonic time read)
        self._writer: asyncio.Task | None = None
        self._sock_fd = -1  # the socket's descriptor, for direct_send (not on TLS)
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self._admitted = False
        self._host = "?"
        self.last_received_s = time.monotonic()
        # SASL listeners: the connection's authenticator until it succeeds (authentication.py)
        self.auth = worker.new_authenticator(listener)
        self._close_after = None  # the request whose answer is the last one (SASL failures)
        self.tls = False  # an SSL listener's connection: fetches cannot use sendfile
        # Kafka's principal, for the authorizer: User:<name> once SASL authenticated, the
        # client certificate's subject on TLS, User:ANONYMOUS otherwise
        self.principal = ANONYMOUS
        self._writable: asyncio.Future | None = None
        self._muted_until = 0.0  # client quotas: reading stops until then (monotonic)
        self._unmute: asyncio.TimerHandle | None = None
        self.fetch_sessions = FetchSessions()  # KIP-227, a follower's (fetch_sessions.py)

    # asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._host = peer[0] if peer else "?"
        if not self.worker.guard.admit(self._host):
            log.debug("refusing %s: over max.connections or max.connections.per.ip", self.peer)
            self._closed = True
            transport.abort()
            return
        self._admitted = True
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock_fd = sock.fileno()
        self.peer_host = f"/{peer[0]}" if peer else ""  # Kafka's client_host form
        self._start_tls(transport)
        self.worker.connections.add(self)

    def _start_tls(self, transport) -> None:
        """On a TLS connection (asyncio calls connection_made once the handshake is done):
        the principal from the client's certificate, verified against the truststore."""
        if transport.get_extra_info("ssl_object") is None:
            return
        self.tls = True
        self.principal = principal_of(transport.get_extra_info("peercert"))
        if self.principal != ANONYMOUS:
            log.info("TLS connection from %s authenticated as %s", self.peer, self.principal)

    def connection_lost(self, exc) -> None:
        self._closed = True
        if not self._admitted:
            return
        self._admitted = False
        self.fetch_sessions.close()
        self.worker.guard.release(self._host)
        self.worker.connections.discard(self)
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        for _, result, _ in self._queue:
            if isinstance(result, asyncio.Future):
                result.cancel()
        self._queue.clear()
        if self._writer is not None:
            self._writer.cancel()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.codec.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.codec.buffer_updated(nbytes)
        self._received()

    def data_received(self, data: bytes) -> None:
        """For a transport that hands out bytes (the BufferedProtocol's fallback)."""
        self.codec.receive_data(data)
        self._received()

    def _received(self) -> None:
        self.last_received_s = now = time.monotonic()
        self.worker.quotas.tick(now)
        while not self._closed:
            try:
                request = self.codec.next_request()
            except ProtocolError as exc:
                log.warning("closing %s: %s", self.peer, exc)
                self.close()
                return
            if request is NEED_DATA:
                break
            request.client_host = self.peer_host
            request.principal = self.principal
            request.listener = self.listener_name
            request.fetch_sessions = self.fetch_sessions
            self._queue.append((request, self._dispatch(request), now))
        self._update_reading()
        self._flush()

    def _update_reading(self) -> None:
        """Stop reading requests while too many answers are owed or the client is not reading
        them; start again once half the queue has drained and the write buffer has too."""
        if self._closed or self._close_after is not None:
            return
        if self._writing_paused or len(self._queue) >= MAX_PENDING_RESPONSES or (
                self._unmute is not None):
            if not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
        elif self._reading_paused and len(self._queue) < MAX_PENDING_RESPONSES // 2:
            self._reading_paused = False
            self.transport.resume_reading()

    # dispatch ----------------------------------------------------------------------------

    def _dispatch(self, request):
        if self.auth is not None:
            outcome = self.auth.receive(request)
            if outcome is not None:
                return self._authentication_answer(request, outcome)
        if request.error is not None:
            return self._error_answer(request, request.error)
        handler = self.worker.handlers.get(request.header.api_key)
        if handler is None:
            return self._error_answer(request, ErrorCode.UNSUPPORTED_VERSION)
        quotas = self.worker.quotas
        started = 0
        if quotas.active:
            quotas.before(request)
            started = time.perf_counter_ns()
        try:
            result = handler(self.worker, request)
            if started:
                request.handler_ns = time.perf_counter_ns() - started
        except Exception:
            log.exception("handler for api %d failed", request.header.api_key)
            return self._error_answer(request, ErrorCode.UNKNOWN_SERVER_ERROR)
        if not request.expects_response:
            return NO_RESPONSE
        if inspect.isawaitable(result):
            future = asyncio.ensure_future(result)
            future.add_done_callback(self._on_answer)
            return future
        return result

    def _authentication_answer(self, request, outcome):
        """Carry out the authenticator's decision: answer, fail (answer after the delay, then
        close, without blocking the loop), or close."""
        action = outcome.action
        if action is Action.DROP:
            return NO_RESPONSE
        if action is Action.CLOSE:
            log.info("closing %s: %s", self.peer, outcome.reason)
            self.close()
            return NO_RESPONSE
        if self.auth.authenticated:
            self.principal = self.auth.principal
            self.auth = None
            self.worker.statistics.authentication_done(True)
            log.debug("%s authenticated as %s", self.peer, self.principal)
            return outcome.body
        if action is Action.ANSWER:
            return outcome.body
        self._close_after = request
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        if action is Action.ANSWER_AND_CLOSE:
            log.info("closing %s after answering: %s", self.peer, outcome.reason)
            return outcome.body
        log.info("authentication of %s failed: %s", self.peer, outcome.reason)
        self.worker.statistics.authentication_done(False)
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(
            self.worker.config.connection_failed_authentication_delay_ms / 1000,
            _resolve, future, outcome.body)
        future.add_done_callback(self._on_answer)
        return future

    def _error_answer(self, request, code):
        """The error body for `request`, or close the connection where Kafka would."""
        body = error_response(request, code) if request.expects_response else NO_RESPONSE
        if body is None:
            log.info("closing %s: %s (api %d v%d) %s", self.peer, ErrorCode(code).name,
                     request.header.api_key, request.header.api_version, request.detail or "")
            self.close()
            return NO_RESPONSE
        return body

    def _on_answer(self, future: asyncio.Future) -> None:
        if not self._closed:
            self._flush()

    # writing -----------------------------------------------------------------------------

    def _flush(self) -> None:
        """Write every answered response at the head of the queue, in order, in one write:
        the answers of pipelined requests that complete together (one read's acks=1
        produces, one group commit's acks=all ones) leave in one send, not one each."""
        if self._writer is not None or self._closed:
            return
        out: list = []
        while self._queue:
            request, result, received = self._queue[0]
            if isinstance(result, asyncio.Future):
                if not result.done():
                    break
                result = self._result_of(request, result)
            self._queue.popleft()
            if self.worker.quotas.active:
                result = self._throttled(request, result)
            self.worker.statistics.request_done(
                request, time.monotonic() - received,
                request.error is not None or getattr(result, "error_code", 0) != 0)
            if result is NO_RESPONSE:
                continue
            try:
                chunks = self.codec.encode_response(request, result)
            except Exception:
                log.exception("cannot encode the answer to api %d v%d; closing %s",
                              request.header.api_key, request.header.api_version, self.peer)
                if out:  # the answers before it still leave, as they did one by one
                    self.transport.writelines(out)
                self.close()
                return
            if request is self._close_after:  # its answer is the last: written, then closed
                self.transport.writelines([*out, *chunks])
                self.close()
                return
            if any(isinstance(c, FileRegion) for c in chunks):
                if self.tls:
                    if out:
                        self.transport.writelines(out)
                    self._writer = asyncio.ensure_future(self._write_through_tls(chunks))
                    return
                chunks = self._send_now([*out, *chunks])
                out = []
                if chunks is None:
                    return  # closed
                if any(isinstance(c, FileRegion) for c in chunks):
                    self._writer = asyncio.ensure_future(self._write_with_sendfile(chunks))
                    return
            out += chunks
        if out:
            self.transport.writelines(out)
        self._update_reading()

    def _throttled(self, request, result):
        """Record the answer against the client's quotas; if over one, the answer carries the
        throttle time and the connection is muted that long once it is written."""
        if result is not NO_RESPONSE and getattr(result, "error_code", 0) not in (0, None):
            return result
        result, throttle_ms = self.worker.quotas.after(
            request, result, request.handler_ns)
        if throttle_ms > 0:
            self._mute(throttle_ms / 1000)
        return result

    def _mute(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = asyncio.get_running_loop().call_later(seconds, self._unmuted)
        if not self._reading_paused and not self._closed and self._close_after is None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _unmuted(self) -> None:
        self._unmute = None
        if self._closed or self._close_after is not None:
            return
        if self._reading_paused and not self._writing_paused and \
                len(self._queue) < MAX_PENDING_RESPONSES // 2:
            self._reading_paused = False
            self.transport.resume_reading()

    def _result_of(self, request, future: asyncio.Future):
        if future.cancelled():
            return self._error_answer(request, ErrorCode.REQUEST_TIMED_OUT)
        exc = future.exception()
        if exc is not None:
            log.error("handler for api %d failed", request.header.api_key, exc_info=exc)
            return self._error_answer(request, ErrorCode.UNKNOWN_SERVER_ERROR)
        return future.result()

    def _send_now(self, chunks) -> list | None:
        """The chunks the socket would not take now (direct_send.py: a fetch response that
        fits the socket's buffer leaves in one sendfile, without asyncio's machinery), or
        None once closed on an error. Only when the transport holds nothing unsent, so
        nothing written here overtakes earlier bytes."""
        if self._sock_fd < 0 or self.transport.get_write_buffer_size() or \
                self.transport.is_closing():
            return chunks
        try:
            return send_now(self._sock_fd, chunks)
        except ShortFile as exc:  # the size prefix promised bytes the file no longer has
            log.error("short sendfile to %s (%s): closing", self.peer, exc)
            self.close()
            return None
        except OSError as exc:
            log.info("sendfile to %s failed: %s", self.peer, exc)
            self.close()
            return None

    async def _write_with_sendfile(self, chunks) -> None:
        loop = asyncio.get_running_loop()
        try:
            for chunk in chunks:
                if not isinstance(chunk, FileRegion):
                    self.transport.write(chunk)
                    continue
                # no fallback: asyncio's would read the file through a seek() our descriptor
                # lacks, and it is taken only when the socket already failed
                sent = await loop.sendfile(self.transport, _Fd(chunk.fd), chunk.offset,
                                           chunk.length, fallback=False)
                if sent != chunk.length:
                    # The response's size prefix promised bytes the file no longer has; the
                    # stream cannot be resynchronised, so the client must reconnect.
                    log.error("short sendfile to %s (%d of %d bytes): closing", self.peer,
                              sent, chunk.length)
                    self.close()
                    return
        except (ConnectionError, OSError, RuntimeError) as exc:
            # RuntimeError: the transport was closing, or the first sendfile call failed (a
            # peer that reset the connection), which asyncio reports as sendfile unavailable
            log.info("sendfile to %s failed: %s", self.peer, exc)
            self.close()
            return
        finally:
            self._writer = None
        self._flush()

    async def _write_through_tls(self, chunks) -> None:
        """A fetch's records on a TLS connection: read from the segment and encrypted piece
        by piece (appliance/tls/fetch_writer.py says why not sendfile, and why not mmap)."""
        try:
            await write_through_tls(self.transport, chunks, self._wait_writable)
        except ShortRead as exc:
            log.error("short read of a segment for %s (%s): closing", self.peer, exc)
            self.close()
            return
        except (ConnectionError, OSError) as exc:
            log.info("TLS fetch write to %s failed: %s", self.peer, exc)
            self.close()
            return
        finally:
            self._writer = None
        self._flush()

    async def _wait_writable(self) -> None:
        """Return once the transport is below its write high-water mark."""
        while self._writing_paused:
            if self._closed:
                raise ConnectionError("the connection closed")
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable

    @property
    def answers_pending(self) -> int:
        """Requests read whose answers have not all been written yet."""
        return len(self._queue) + (self._writer is not None)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.transport is not None:
                self.transport.close()
