"""A response written straight to its socket, now, when the socket takes it all.

Why: a fetch response's records leave with sendfile, and asyncio's `loop.sendfile` is built
for files larger than the socket's buffer: it waits for the transport's buffer to drain,
pauses the protocol's reading, stats the file, and runs the copy as a task with a future per
round, then resumes reading. A replica fetch of 1 MiB, or a consumer's fetch, usually fits
the socket's send buffer whole: one `sendfile` call. A catching-up follower's leader spent
about 0.4 ms of Python per fetch in that machinery, a quarter of its CPU per fetch.

So the connection first offers the chunks here, when its transport holds nothing unsent
(then nothing written here can overtake earlier bytes): the byte chunks go with one
`writev`, each `FileRegion` with `sendfile`, until the socket would block. What is left (the
first chunk possibly cut where the socket stopped) goes the asyncio way, in order.

Errors: a socket error is raised as OSError for the connection to close on, as the
asyncio path does; a file shorter than its region promised raises ShortFile (the response's
size prefix promised bytes that cannot come: the stream cannot be resynchronised).
"""

from __future__ import annotations

import os

from klog.protocol.chunks import Chunk, FileRegion

_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


class ShortFile(OSError):
    """A FileRegion's file ended before its length was sent."""


def send_now(fd: int, chunks: list[Chunk]) -> list[Chunk]:
    """Write `chunks` to the non-blocking socket `fd` until it would block; the chunks left,
    in order (empty when everything went)."""
    i, n = 0, len(chunks)
    while i < n:
        chunk = chunks[i]
        if isinstance(chunk, FileRegion):
            try:
                sent = os.sendfile(fd, chunk.fd, chunk.offset, chunk.length) \
                    if chunk.length else 0
            except (BlockingIOError, InterruptedError):
                return chunks[i:]
            if sent == 0 and chunk.length:
                raise ShortFile(f"the file ends before {chunk.length} bytes at "
                                f"{chunk.offset} could be sent")
            if sent < chunk.length:
                return [FileRegion(chunk.fd, chunk.offset + sent, chunk.length - sent),
                        *chunks[i + 1:]]
            i += 1
            continue
        j = i + 1
        while j < n and j - i < _IOV_MAX and not isinstance(chunks[j], FileRegion):
            j += 1
        try:
            sent = os.writev(fd, chunks[i:j])
        except (BlockingIOError, InterruptedError):
            return chunks[i:]
        while i < j:  # skip what went; cut the chunk where the socket stopped
            size = len(chunks[i]) if not isinstance(chunks[i], memoryview) else \
                chunks[i].nbytes
            if sent < size:
                return [memoryview(chunks[i]).cast("B")[sent:], *chunks[i + 1:]]
            sent -= size
            i += 1
    return []
