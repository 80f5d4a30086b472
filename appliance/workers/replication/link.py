"""A follower's connection to its leader's node: one request, then its response (or two in
flight), each large response received straight into a buffer of its own size.

Why not asyncio streams: a replica fetch answers up to megabytes of record batches, and a
stream reader copies them three times in Python before the codec sees them (into the
reader's buffer, out of it, then into a frame assembled from chunks), on the CPU that the
follower's catch-up is bound by. Here the kernel writes each response into its frame's
buffer (`BufferedProtocol`), the codec decodes the records as views of it, and the
follower appends those views: the record bytes are copied once, by the kernel, on their way
in (and once more on their way into the page cache; a small answer, such as an idle
fetch's, is copied once more out of the head buffer that the first read of every response
lands in). The frame buffers come from the worker's `BufferPool`
(klog/protocol/arena_frames.py) and go back to it once no view of a response is left: a
fresh megabyte per response cost its page faults and zeroing, 6% of a catching-up
follower's CPU.

Errors: a size prefix outside [0, max_frame_bytes] raises FramingError before anything is
allocated; a closed connection ConnectionError; no whole response within the timeout
TimeoutError. After any of them the link is unusable: close it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from appliance.workers.replication.dialing import LinkSecurity, authenticate
from klog.protocol.arena_frames import SHARED_POOL, BufferPool
from klog.protocol.client import ClientConnection
from klog.protocol.exceptions import FramingError
from klog.protocol.frames import DEFAULT_MAX_FRAME_BYTES
from klog.protocol.primitives import INT32

HEAD_BYTES = 64 * 1024  # a read lands here unless it continues a large frame


class _Frames(asyncio.BufferedProtocol):
    """Size-prefixed frames. A read lands in a small head buffer, which takes the size prefix
    and small frames whole; a frame larger than the head gets a buffer of exactly its size
    (from the pool), what came of it so far copied over, and the reads that follow go straight
    into it. So a 1 MiB response costs two reads, the prefix and its first bytes in one, the
    rest in the other; small answers come whole in one."""

    def __init__(self, max_frame_bytes: int, pool: BufferPool = SHARED_POOL):
        self.max_frame_bytes = max_frame_bytes
        self.transport: asyncio.Transport | None = None
        self._pool = pool
        self._head = memoryview(bytearray(HEAD_BYTES))
        self._head_used = 0  # bytes in the head not yet taken into a frame
        self._frame: memoryview | None = None  # a large frame while it fills
        self._have = 0
        self._done: deque[memoryview | bytes] = deque()
        self._waiter: asyncio.Future | None = None
        self._error: Exception | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame[self._have:]
        return self._head[self._head_used:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._have += nbytes
            if self._have == len(self._frame):
                self._done.append(self._frame)
                self._frame, self._have = None, 0
                self._wake()
            return
        self._head_used += nbytes
        if self._take_from_head():
            self._wake()

    def _take_from_head(self) -> bool:
        """Take every frame the head holds, and start a large one in its own buffer; True if
        a frame is done."""
        head, used, pos, done = self._head, self._head_used, 0, False
        while used - pos >= 4:
            size = INT32.unpack_from(head, pos)[0]
            if not 0 <= size <= self.max_frame_bytes:
                self._fail(FramingError(f"frame size {size} outside [0, "
                                        f"{self.max_frame_bytes}]"))
                self.transport.close()
                return done
            here = used - pos - 4
            if here >= size:  # whole in the head: copied out, the head is reused
                self._done.append(bytes(head[pos + 4:pos + 4 + size]))
                pos += 4 + size
                done = True
                continue
            if 4 + size <= len(head):
                break  # a small frame, unfinished: it finishes in the head
            self._frame = self._pool.take(size)
            self._frame[:here] = head[pos + 4:used]
            self._have, pos = here, used
            break
        if pos:  # what is left (part of a prefix or of a small frame) moves to the front
            head[:used - pos] = head[pos:used]
            self._head_used = used - pos
        return done

    def connection_lost(self, exc) -> None:
        self._fail(exc or ConnectionError("the leader closed the connection"))

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next_frame(self, timeout_s: float) -> memoryview | bytes:
        """The oldest whole frame; TimeoutError if none comes within `timeout_s`. Waits on a
        future with a timer rather than asyncio.wait_for, whose task of its own costs two
        more rounds of the loop per response."""
        loop = None
        while not self._done:
            if self._error is not None:
                raise self._error
            loop = loop or asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout_s, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
        return self._done.popleft()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no response from the leader in time"))


class ReplicaLink:
    """Open with `ReplicaLink.open`; `ask` one request at a time, or `send` a second before
    the first one's response is `receive`d (answered in order)."""

    def __init__(self, transport, frames: _Frames, node_id: int, client_id: str | None = None):
        self.transport = transport
        self.frames = frames
        self.connection = ClientConnection(client_id=client_id or f"klog-replica-{node_id}")

    @classmethod
    async def open(cls, host: str, port: int, node_id: int, *, timeout_s: float = 10,
                   max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                   security: LinkSecurity | None = None) -> ReplicaLink:
        """Connect (over TLS and authenticated with SASL when `security` says so);
        OSError or TimeoutError if the leader's node cannot be reached, ConnectionError if
        it refuses the authentication. asyncio's TLS transport hands the protocol
        plaintext through the same buffer calls, so responses still land in their own
        frames."""
        security = security or LinkSecurity()
        loop = asyncio.get_running_loop()
        tls = {} if security.tls is None else {"ssl": security.tls, "server_hostname": host}
        transport, frames = await asyncio.wait_for(loop.create_connection(
            lambda: _Frames(max_frame_bytes), host, port, **tls), timeout_s)
        link = cls(transport, frames, node_id, security.client_id)
        if security.sasl is not None:
            try:
                await asyncio.wait_for(authenticate(link, security.sasl), timeout_s)
            except BaseException:
                link.abort()
                raise
        return link

    async def ask(self, api_key: int, version: int, body, *, timeout_s: float = 30):
        """Send a request and return its decoded response (whose records are views of the
        response's own buffer)."""
        self.send(api_key, version, body)
        return await self.receive(timeout_s=timeout_s)

    def send(self, api_key: int, version: int, body) -> None:
        """Write a request now; its response is the next `receive` after those of the
        requests sent before it (responses come in order: a follower may have a second fetch
        in flight, fetcher.py)."""
        _, data = self.connection.send_request(api_key, version, body)
        self.transport.write(data)

    async def receive(self, *, timeout_s: float = 30):
        """The decoded response of the oldest request in flight."""
        frame = await self.frames.next_frame(timeout_s)
        return self.connection.response_of(memoryview(frame))[1]

    def abort(self) -> None:
        """Drop the connection now, a response in flight with it: `ask` raises
        ConnectionError."""
        self.transport.abort()

    async def close(self) -> None:
        self.transport.close()
        with contextlib.suppress(Exception):
            await asyncio.sleep(0)  # let the transport finish closing
