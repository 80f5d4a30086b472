"""Fetch record bytes through a TLS transport, without a Python copy of the records.

sendfile cannot encrypt, so on a TLS connection each `FileRegion` of a Fetch response is read
from the segment into one buffer of `PIECE_BYTES`, reused for the whole response, and handed to
the transport as a memoryview: the bytes pass from the page cache to the buffer (one memcpy by
the kernel) and from the buffer into OpenSSL, which encrypts them; no `bytes` object of the
records is ever built, and the memory held is one piece however large the fetch.

Why `os.preadv` into a reused buffer and not an mmap of the segment: segments are truncated
while open (a follower cutting its log back, retention's truncation of a torn tail), and a
mapped page past a new end of file raises SIGBUS, which would kill the worker instead of
closing one connection; a short `preadv` is an ordinary error. The extra memcpy costs little
beside the encryption: perf/bench_tls_fetch.py, two runs on the 2-core test machine (client on
the same host, 64 MB read 4 times in 16 MB fetches): PLAINTEXT sendfile 941 and 1234 MB/s,
SSL 905 and 902 MB/s; in process over loopback TLS, preadv 583 and 578 MB/s against mmap
620 and 522 MB/s (within the noise of each other).

Why the buffer can be refilled once `transport.write` returns: asyncio's SSL transport, in its
connected state, passes the bytes to `SSLObject.write` at once, and a memory-BIO TLS object
takes them all unless a renegotiation is under way, which the server context forbids
(`OP_NO_RENEGOTIATION`; TLS 1.3 has none). If a transport ever keeps the view queued anyway
(checked through asyncio's backlog when it has one), the next piece gets a fresh buffer.

Flow control: after each piece the writer waits while the transport is above its write
high-water mark, so a slow client holds one piece plus the transport's buffer, not the fetch.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable

from klog.protocol.chunks import Chunk, FileRegion

PIECE_BYTES = 256 * 1024


class ShortRead(Exception):
    """The segment ended before the region the response's size prefix promised."""


def _still_queued(transport) -> bool:
    protocol = getattr(transport, "_ssl_protocol", None)
    return bool(getattr(protocol, "_write_backlog", None))


async def write_through_tls(transport, chunks: Iterable[Chunk],
                            wait_writable: Callable[[], Awaitable[None]]) -> None:
    """Write `chunks` in order; raise ShortRead, or ConnectionError once the transport
    closes."""
    buffer: memoryview | None = None
    for chunk in chunks:
        if not isinstance(chunk, FileRegion):
            transport.write(chunk)
            continue
        offset, left = chunk.offset, chunk.length
        while left:
            if buffer is None:
                buffer = memoryview(bytearray(PIECE_BYTES))
            piece = buffer[:min(left, PIECE_BYTES)]
            count = os.preadv(chunk.fd, [piece], offset)
            if count <= 0:
                raise ShortRead(f"{chunk.length - left} of {chunk.length} bytes")
            if transport.is_closing():
                raise ConnectionError("the connection closed during a fetch")
            transport.write(piece[:count])
            if _still_queued(transport):
                buffer = None  # the transport still holds the view: never overwrite it
            offset += count
            left -= count
            await wait_writable()
