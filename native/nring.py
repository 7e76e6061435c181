"""The Python binding of the C byte ring (nring.h): the nComponent's DRAM buffers.

Interface:
    NRing(arena, offset, cap)     a ring over arena[offset : offset + cap]
    ring.used, ring.space          bytes held / bytes free
    ring.put(data) -> int          copy in what fits
    ring.get(n) -> bytes, ring.get_into(buf) -> int, ring.peek(n) -> bytes, ring.drop(n)
    ring.reset()                   empty it
    ring.used_views(n) / ring.free_views(n)
                                   the first n used / free bytes, in place: one or two
                                   memoryviews (two where the ring wraps); after copying
                                   out of or into them, ring.drop(n) / ring.commit(n)
    ring.recv(fd, max) -> int      one non-blocking read from a socket into the ring; 0: EOF
    ring.send(fd) -> int           one non-blocking write of the ring to a socket; 0: none taken
C return codes become exceptions here (`_check`, which ddio.py shares): a negative
errno raises OSError with that errno, so EAGAIN arrives as BlockingIOError,
EPIPE as BrokenPipeError, ECONNRESET as ConnectionResetError -- as Python's own
socket methods would raise them.
"""

import errno
import os
from typing import Any

from native import load

_c = load("_nring", "C ring")
ffi, lib = _c.ffi, _c.lib

__all__ = ["NRing"]

MAX_CAP = 0xFFFF_FFFF  # bytes: positions inside the ring are uint32_t
_scratch = ffi.new_allocator(should_clear_after_alloc=False)  # get/peek: only copied bytes are read


def _check(rc: int, what: str, again: int | None = None) -> int:
    """A C result: rc >= 0 as is; -EAGAIN as `again` if given; else OSError(-rc)."""
    if rc >= 0:
        return rc
    if rc == -errno.EAGAIN and again is not None:
        return again
    raise OSError(-rc, f"nRing {what}: {os.strerror(-rc)}")


class NRing:
    """A byte ring over a slice of a writable buffer (the nComponent's DRAM arena).

    Contract: not thread-safe -- the nMonitor keeps one ring per direction per
    bsdSocketSkeleton and only its owner touches it. The arena outlives the
    ring: the ring holds a buffer export of it, so closing an mmap arena raises
    BufferError until every ring over it is gone.
    Counts never raise: put copies what fits, get/peek return what is there.
    drop(n) with n > used is a broken invariant and raises ValueError.
    """

    def __init__(self, arena: Any, offset: int, cap: int):
        self._arena = ffi.from_buffer(arena, require_writable=True)
        if not 0 < cap <= MAX_CAP or offset < 0 or offset + cap > len(self._arena):
            raise ValueError(f"no ring of {cap} B at offset {offset} of a "
                             f"{len(self._arena)} B arena")
        self.cap = cap
        self._r = ffi.new("nring *")
        lib.nring_init(self._r, self._arena + offset, cap)
        self._bytes = memoryview(arena)[offset:offset + cap]

    def _views(self, pos: int, n: int) -> list[memoryview]:
        at = pos % self.cap
        first = min(n, self.cap - at)
        if first == n:
            return [self._bytes[at:at + n]]
        return [self._bytes[at:], self._bytes[:n - first]]

    def used_views(self, n: int) -> list[memoryview]:
        """The first min(n, used) bytes in the ring, in place (then drop() them)."""
        return self._views(self._r.head, min(n, self.used))

    def free_views(self, n: int) -> list[memoryview]:
        """Room for min(n, space) bytes, in place (write them, then commit())."""
        return self._views(self._r.tail, min(n, self.space))

    def commit(self, n: int) -> int:
        """Add n bytes written into free_views(); returns how many (clamped to space)."""
        return lib.nring_commit(self._r, n)

    @property
    def used(self) -> int:
        return lib.nring_used(self._r)

    @property
    def space(self) -> int:
        return lib.nring_space(self._r)

    def put(self, data: Any) -> int:
        """Copy in as much of data (bytes-like) as fits; return how many bytes."""
        src = data if type(data) is bytes else ffi.from_buffer(data)  # cffi takes bytes as is
        return lib.nring_put(self._r, src, min(len(src), MAX_CAP))

    def get(self, n: int) -> bytes:
        """Take up to n bytes out of the ring."""
        buf = _scratch("char[]", min(n, self.cap))
        return ffi.unpack(buf, lib.nring_get(self._r, buf, len(buf)))

    def get_into(self, buf: Any) -> int:
        """Take up to len(buf) bytes out of the ring into buf; return how many."""
        dst = ffi.from_buffer(buf, require_writable=True)
        return lib.nring_get(self._r, dst, min(len(dst), MAX_CAP))

    def peek(self, n: int) -> bytes:
        """Up to n bytes from the front of the ring, left in it."""
        buf = _scratch("char[]", min(n, self.cap))
        return ffi.unpack(buf, lib.nring_peek(self._r, buf, len(buf)))

    def drop(self, n: int) -> None:
        """Consume n bytes (0 <= n <= used), e.g. after a peek."""
        if not 0 <= n <= lib.nring_used(self._r):
            raise ValueError(f"cannot drop {n} B from a ring holding {self.used} B")
        lib.nring_drop(self._r, n)

    def reset(self) -> None:
        """Empty the ring."""
        lib.nring_drop(self._r, lib.nring_used(self._r))

    def recv(self, fd: int, max: int = MAX_CAP) -> int:
        """One non-blocking read of at most max bytes from socket fd into the ring.

        Returns the bytes read (> 0), or 0 at EOF. Raises BlockingIOError when
        nothing waits, OSError(ENOBUFS) when the ring is full, OSError(errno)
        for the socket's other errors."""
        return _check(lib.nring_recv(self._r, fd, min(max, MAX_CAP)), "recv")

    def send(self, fd: int) -> int:
        """One non-blocking write of the ring's bytes to socket fd; consumes what was taken.

        Returns the bytes taken: 0 if the ring is empty or the kernel's buffer is
        full (EAGAIN). Raises OSError(errno) for real errors, such as EPIPE or
        ECONNRESET when the peer has gone."""
        return _check(lib.nring_send(self._r, fd), "send", again=0)
