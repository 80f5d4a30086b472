"""What encoders return: a list of chunks, some of which the I/O layer sends itself.

A Fetch response is mostly record bytes that already sit in a segment file. Copying them into
Python would defeat the paper's point, so the encoder leaves a :class:`FileRegion` placeholder
in their place and the worker sends it with ``os.sendfile`` (h11's
``send_with_data_passthrough`` is the model). Everything else is joined into as few ``bytes``
chunks as possible, so the socket sees few, large writes.

A chunk is therefore one of:

- ``bytes``: the encoder's own output (header, fields, small record sets);
- a bytes-like object the caller handed in as a large ``records`` value (``bytes``,
  ``bytearray`` or ``memoryview``), passed through uncopied;
- a :class:`FileRegion`.

The 4-byte size prefix is reserved up front and filled in by :meth:`ChunkWriter.finish` once the
total is known, file-region lengths included. The worker must send exactly ``region.length``
bytes for each region (or close the connection), or the frame sizes on the wire go wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from klog.protocol.exceptions import EncodeError
from klog.protocol.primitives import INT32, byte_length

#: Record values shorter than this are copied into the surrounding chunk instead of passed
#: through: one more small copy is cheaper than one more ``send`` call.
PASSTHROUGH_MIN_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of the open file ``fd`` starting at ``offset``, to send with sendfile.

    The codec never touches ``fd``; it only counts ``length`` into the frame size.
    """

    fd: int
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 0:
            raise ValueError(f"FileRegion with negative offset or length: {self}")


Chunk = bytes | bytearray | memoryview | FileRegion


def chunk_length(chunk: Chunk) -> int:
    return chunk.length if isinstance(chunk, FileRegion) else byte_length(chunk)


class ChunkWriter(bytearray):
    """A ``bytearray`` the primitives append to, plus passed-through chunks.

    The primitives see an ordinary ``bytearray``; only the ``records`` writer calls
    :meth:`passthrough`. Create one per frame, with ``size_prefix=True`` to reserve the
    frame's length, then call :meth:`finish` once.
    """

    def __init__(self, *, size_prefix: bool = True) -> None:
        super().__init__(4 if size_prefix else 0)
        self.size_prefix = size_prefix
        self.chunks: list[Chunk] = []
        self.passed_bytes = 0  # bytes already moved to ``chunks``

    def passthrough(self, piece: Chunk) -> None:
        """Append ``piece`` without copying it, unless it is small enough to join."""
        if not isinstance(piece, FileRegion) and byte_length(piece) < PASSTHROUGH_MIN_BYTES:
            self += piece
            return
        if self:
            self._flush()
        self.chunks.append(piece)
        self.passed_bytes += chunk_length(piece)

    def total_bytes(self) -> int:
        return self.passed_bytes + len(self)

    def finish(self) -> list[Chunk]:
        """Fill in the size prefix and return the chunks; the writer is spent afterwards."""
        if self.size_prefix:
            size = self.total_bytes() - 4
            if size > 0x7FFFFFFF:
                raise EncodeError(f"frame of {size} bytes does not fit an int32 size prefix")
            if self.chunks:
                first = self.chunks[0]
                assert isinstance(first, bytes)  # the first flush holds the reserved prefix
                self.chunks[0] = INT32.pack(size) + first[4:]
            else:
                INT32.pack_into(self, 0, size)
        if self:
            self._flush()
        chunks, self.chunks = self.chunks, []
        return chunks

    def _flush(self) -> None:
        self.chunks.append(bytes(self))
        self.passed_bytes += len(self)
        self.clear()


def join_chunks(chunks: list[Chunk]) -> bytes:
    """All chunks as one ``bytes``; for callers that have no file to send (the client)."""
    if any(isinstance(chunk, FileRegion) for chunk in chunks):
        raise EncodeError("a FileRegion cannot be joined into bytes; send it with sendfile")
    if len(chunks) == 1 and isinstance(chunks[0], bytes):
        return chunks[0]
    return b"".join(chunks)  # type: ignore[arg-type]


def encoded_value(write: Any, value: Any) -> bytes:
    """Encode one value with ``write`` into its own bytes (for tagged fields, which need their
    size before their content)."""
    out = ChunkWriter(size_prefix=False)
    write(out, value)
    if out.chunks:
        raise EncodeError("records cannot travel in a tagged field")
    return bytes(out)
