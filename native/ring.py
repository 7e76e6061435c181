"""FIT's ring handle (fitring.h's fr_ring), part of the fitring binding (native/fitring.py).

Interface (native/fitring.py's docstring has the whole binding's):
    ring = Ring(seg, which, peer_bell, peer_efd, keep)   (Segment.ring makes it)
    ring.send(head, payload), ring.post(op, head, payload[, counts]),
    ring.request(op, seq, payload) -> bool
    ring.reserve(n) -> memoryview | None; ring.commit(n); ring.wait_space(...)
    ring.peek() -> memoryview | None; ring.consume(); ring.release(counts, op, n)
    ring.view(at, n); ring.answer(rx, op, seq, payload[, counts, nrx]) -> bool
    ring.pending(); ring.modeled

One side uses a Ring as producer or as consumer, never both. This file also
holds the C module's handle (ffi, lib) for the binding's other parts, and the
one place where its return codes become exceptions (`ring_error`: -EBADMSG is
RingBroken, -EINTR Interrupted, any other OSError(-rc)); a would-be block
(-EAGAIN) is False or None, never an exception.
"""

import errno
import os
from typing import TYPE_CHECKING, Any

from native import load

if TYPE_CHECKING:
    from native.fitring import Segment

_c = load("_fitring", "C FIT rings")
ffi, lib = _c.ffi, _c.lib


class Interrupted(BaseException):
    """A signal handler of a native program, installed without SA_RESTART, ran during
    its accept, recv or send, which waited (-EINTR: fitring.h, fr_signal_ends_call): the
    call returns EINTR, as Linux's would (splitrack/guest/interposer.py). Not an
    OSError, so that no layer between the wait and the call takes it for a failure of
    the rack; a BaseException, as KeyboardInterrupt, so that every layer's cleanup
    runs."""


class RingBroken(OSError):
    """The peer wrote something into a ring that is not a FIT ring (EBADMSG):
    the connection cannot be trusted any further."""

    def __init__(self, what: str):
        super().__init__(errno.EBADMSG, what)


class Ring:
    """One side's handle on one ring of a Segment: it produces or it consumes."""

    __slots__ = ("seg", "r", "_len", "_data", "_view", "_keep")

    def __init__(self, seg: "Segment", which: int, peer_bell: Any, peer_efd: int,
                 keep: Any = None):
        self.seg = seg
        self.r = ffi.new("fr_ring *")
        self._keep = keep   # the mapping the bell word lives in
        lib.fr_attach(self.r, seg.base, seg.cap, which,
                      ffi.NULL if peer_bell is None else peer_bell, peer_efd)
        self._len = ffi.new("uint32_t *")
        self._data = lib.FR_HEADER_BYTES + which * seg.cap
        self._view = seg.view

    @property
    def max_payload(self) -> int:
        return lib.fr_max_payload(self.r)

    # ---- producer ------------------------------------------------------------------
    def send(self, head: Any, payload: Any = b"") -> bool:
        """One message, head then payload; False if the ring has no room now."""
        rc = lib.fr_send2(self.r, ptr_of(head), len(head), ptr_of(payload), len(payload))
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise ring_error(rc, "send")

    def post(self, op: int, head: bytes, payload: Any, counts: Any = ffi.NULL) -> bool:
        """One ONEWAY message (op; head, then payload), its FIT header written in C
        (fitserve.h: fs_post) and counted in `counts` (a Counts' handle: fitcounts.py);
        False if the ring has no room now."""
        rc = lib.fs_post(self.r, counts, op, head, len(head),   # (ptr_of inline: hot)
                         payload if type(payload) is bytes else ffi.from_buffer(payload),
                         len(payload))
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise ring_error(rc, "post")

    def request(self, op: int, seq: int, payload: Any) -> bool:
        """One REQUEST (op, seq; payload), its FIT header written in C (fitserve.h:
        fs_request), its reply waited for apart; False if the ring has no room now."""
        rc = lib.fs_request(self.r, op, seq, payload if type(payload) is bytes   # (ptr_of
                            else ffi.from_buffer(payload), len(payload))          # inline)
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise ring_error(rc, "request")

    def reserve(self, n: int) -> memoryview | None:
        """Room for a message of n bytes, in the ring; None if there is none now."""
        at = lib.fr_reserve(self.r, n)
        if at < 0:
            if at == -errno.EAGAIN:
                return None
            raise ring_error(at, "reserve")
        start = self._data + at
        return self._view[start:start + n]

    def commit(self, n: int) -> None:
        """Publish the reserved message, its first n bytes."""
        lib.fr_commit(self.r, n)

    def wait_space(self, n: int, own_efd: int, spin_s: float, timeout_s: float) -> bool:
        """Until a message of n bytes fits (True) or timeout_s passes (False)."""
        rc = lib.fr_wait_space(self.r, n, own_efd, int(spin_s * 1e9), ns_of(timeout_s))
        if rc == 0:
            return True
        if rc == -errno.ETIMEDOUT:
            return False
        raise ring_error(rc, "wait for space")

    # ---- consumer ------------------------------------------------------------------
    def peek(self) -> memoryview | None:
        """The next message in place (valid until consume()); None if there is none."""
        at = lib.fr_peek(self.r, self._len)
        if at < 0:
            if at == -errno.EAGAIN:
                return None
            raise ring_error(at, "peek")
        start = self._data + at
        return self._view[start:start + self._len[0]]

    def consume(self) -> None:
        lib.fr_consume(self.r)

    def release(self, counts: Any, op: int, n: int) -> None:
        """consume(), the message counted rx in `counts` (a Counts' handle:
        fitcounts.py) as one of op and n bytes (fitserve.h: fs_release)."""
        lib.fs_release(self.r, counts, op, n)

    def view(self, at: int, n: int) -> memoryview:
        """n bytes at `at` in this ring's data (WaitSet.take's message), in place."""
        start = self._data + at
        return self._view[start:start + n]

    def answer(self, rx: "Ring", op: int, seq: int, payload: Any, counts: Any = ffi.NULL,
               nrx: int = 0) -> bool:
        """A REPLY (err 0, untraced) with op and seq to the message at rx's front,
        then that message released (fitserve.h), both counted in `counts` (the
        request as nrx bytes); False: no room now, neither done."""
        rc = lib.fs_answer(self.r, rx.r, counts, op, seq,   # (ptr_of inline: this is hot)
                           payload if type(payload) is bytes else ffi.from_buffer(payload),
                           len(payload), nrx)
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise ring_error(rc, "answer")

    def pending(self) -> bool:
        """Whether the producer published anything not yet consumed (due or not)."""
        return bool(lib.fr_pending(self.r))

    @property
    def modeled(self) -> bool:
        return bool(self.r.modeled)

def ptr_of(data: Any) -> Any:
    return data if type(data) is bytes else ffi.from_buffer(data)


def ns_of(timeout_s: float | None) -> int:
    return -1 if timeout_s is None else max(0, int(timeout_s * 1e9))


def ring_error(rc: int, what: str) -> BaseException:
    if rc == -errno.EBADMSG:
        return RingBroken(f"FIT ring {what}: the peer broke the ring")
    if rc == -errno.EINTR:
        return Interrupted(f"FIT ring {what}: a signal handler without SA_RESTART ran")
    return OSError(-rc, f"FIT ring {what}: {os.strerror(-rc)}")
