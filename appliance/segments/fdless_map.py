"""A shared file mapping that holds no file descriptor (for the segment indexes).

Why: Python's ``mmap.mmap`` keeps a ``dup()`` of the descriptor it maps for as long as the map
lives (``trackfd=False`` only exists from Python 3.13). With the index's own descriptor that
made five descriptors per segment (``.log``, ``.index`` twice, ``.timeindex`` twice): about
5,000 per worker at 1,000 idle partitions, and EMFILE at ~8,000 partitions under a 20,000
limit (issue 26, measured). A mapping needs no descriptor once made, so this maps through
libc and closes nothing behind anyone's back: the index opens its file only for the moment
it maps, resizes or syncs it. What remains per segment is the ``.log`` descriptor and up to
two mappings (``vm.max_map_count``, README "Limits").

The view is a ``memoryview`` of unsigned bytes, as ``mmap.mmap`` was used: slicing,
``struct.unpack_from``/``pack_into``, comparison with bytes. A read-only mapping hands out a
read-only view (a write raises TypeError instead of faulting). After :meth:`close` the view is
released; callers keep no slice of it beyond one call (index.py does not).
"""

from __future__ import annotations

import ctypes
import mmap
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.restype = ctypes.c_int
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


class FdlessMap:
    """``length`` bytes of the file open as ``fd``, MAP_SHARED; ``fd`` may be closed at once.
    Raises OSError (as mmap.mmap would)."""

    def __init__(self, fd: int, length: int, *, writable: bool, advice: int = mmap.MADV_RANDOM):
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        addr = _libc.mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}")
        self._addr, self._length = addr, length
        _libc.madvise(addr, length, advice)
        view = memoryview((ctypes.c_ubyte * length).from_address(addr)).cast("B")
        self.view = view if writable else view.toreadonly()

    def __len__(self) -> int:
        return self._length

    def drop_resident(self) -> None:
        """Unmap the pages faulted in so far (MADV_DONTNEED). For a shared file mapping nothing
        is lost: a dirty page stays dirty in the page cache and is written back as ever, and
        the next access faults it in again from there. Only this process's RSS shrinks."""
        if self._addr is not None:
            _libc.madvise(self._addr, self._length, mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Unmap (idempotent)."""
        if self._addr is not None:
            self.view.release()
            self.view = None
            _libc.munmap(self._addr, self._length)
            self._addr = None

    def __del__(self):
        self.close()
