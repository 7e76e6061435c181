"""The Python binding of FIT's shared-memory rings and doorbells (fitring.h).

Interface:
    seg, fd = Segment.create(cap)      a fresh connection segment: a memfd, sealed
                                       against shrinking, formatted (the connector)
    seg.set_model(latency_ns, bytes_per_s)
                                       an interconnect model for both rings (the
                                       connector, before the segment is handed over)
    seg = Segment.open(fd)             the other side's segment: seals and layout checked
    ring = seg.ring(which, peer_bell, peer_efd)
                                       this side's handle on ring 0 or 1 (producer or
                                       consumer: the caller uses it as one of the two)
    bell = Bell.create()               this endpoint's doorbell: a page only it may
                                       write (sealed) holding the bell word, and an eventfd
    word = Bell.peer_word(page_fd)     a peer's bell word, mapped read only
    ring.send(head, payload)           one message (head + payload); False if no room now
    ring.post(op, head, payload) -> bool  a ONEWAY message, its header written in C
    ring.reserve(n) -> memoryview      room for n bytes in the ring; then ring.commit(n)
    ring.wait_space(n, own_efd, spin_s, timeout_s) -> bool
    ring.peek() -> memoryview | None   the next message, in place; ring.consume() after
    waitset = WaitSet(bell)            the rings one consumer waits on, and its bell
    waitset.rings = [...]; waitset.wait(spin_s, timeout_s, fds) -> index | WOKEN | TIMEOUT
    waitset.calls(out, cap, fds, spin_s)  what its calls need, set once: the landing
                                       for replies (landing(cap)'s handle), the fds
                                       to watch, the spin
    waitset.call(tx, op, seq, payload, timeout_s) -> n | SENT | UNSENT
                                       a REQUEST on tx and what comes back on
                                       rings[0], read into out, in one native call
                                       (fitserve.h: fs_call); waitset.plain: it is
                                       the reply to seq, well-formed, err 0
    waitset.recv(timeout_s) -> n | SENT    the next message of rings[0] (a channel's),
                                       waited for and read into out (fs_recv);
                                       waitset.plain: a well-formed one-way, op
                                       waitset.op
    waitset.take(spin_s=0, timeout_s=0) -> index | -1 | WOKEN | TIMEOUT; waitset.msg
                                       ready() and that ring's message peeked with its
                                       header read, after a wait if none is there and
                                       timeout_s is not 0, in one native call (fitserve.h)
    ring.answer(rx, op, seq, payload) -> bool
                                       a REPLY to rx's front message, then that message
                                       released, in one native call; False: no room now
    header_constants(magic, version, request, reply, oneway, max_payload)
                                       the FIT header's, for take() and answer() (once)
    waitset.arm() -> bool; waitset.due  armed: nothing due now; `due`: when a message
                                       published becomes due (ns, NEVER: none is)
    waitset.next_due() -> ns           likewise without arming (0: one is due now)
    waker = Waker(efd)                 one fd for an outside loop: readable when efd is
                                       rung or at the time waker.at(ns) set (a model's
                                       due time)
    waitset.arm_with(waker) -> bool    arm(), and the waker's timer set for a message
                                       not yet due
    spin_yield() -> bool               a spinner's yield: False once the CPU is
                                       contended (fitring.h: fr_spin_yield)

C return codes become exceptions here and nowhere else: a ring its peer broke
(-EBADMSG) raises RingBroken, a message no ring can hold (-EMSGSIZE)
OSError(EMSGSIZE). A memoryview a ring hands out points into shared memory:
it is valid until consume() (or commit()), and its bytes may change if the
peer misbehaves -- copy what must be kept.
"""

import errno
import fcntl
import mmap
import os
import select
import time
from typing import Any

from native import load

_c = load("_fitring", "C FIT rings")
ffi, lib = _c.ffi, _c.lib

__all__ = ["Segment", "Ring", "Bell", "WaitSet", "Waker", "RingBroken", "WOKEN", "TIMEOUT",
           "SENT", "UNSENT", "NEVER", "DUE_SPIN_NS", "spin_yield", "now_ns", "landing",
           "header_constants"]

_F_ADD_SEALS, _F_GET_SEALS = 1033, 1034
_SEAL_SEAL, _SEAL_SHRINK, _SEAL_GROW, _SEAL_FUTURE_WRITE = 1, 2, 4, 16
_BELL_BYTES = 4096
WOKEN = -1     # WaitSet.wait: woken with nothing to read (a doorbell with nothing behind it)
TIMEOUT = -2   # WaitSet.wait: the timeout passed
SENT = -3      # WaitSet.call: the request is out, nothing came back for it yet
UNSENT = -4    # WaitSet.call: the ring had no room, nothing was sent
NEVER = lib.FR_NEVER              # a due time: nothing is published
DUE_SPIN_NS = lib.FR_DUE_SPIN_NS  # a waiter this close to a due time spins to it


class RingBroken(OSError):
    """The peer wrote something into a ring that is not a FIT ring (EBADMSG):
    the connection cannot be trusted any further."""

    def __init__(self, what: str):
        super().__init__(errno.EBADMSG, what)


def sealed_memfd(name: str, size: int, seals: int = _SEAL_SHRINK | _SEAL_GROW) -> int:
    """A memfd of `size` bytes that nobody can shrink (so no mapping of it can fault)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, _F_ADD_SEALS, seals)
    except OSError:
        os.close(fd)
        raise
    return fd


def check_sealed(fd: int, seals: int = _SEAL_SHRINK) -> int:
    """The size of a memfd a peer passed, if it carries `seals`; EPERM otherwise
    (a memfd its maker could shrink would crash us with SIGBUS)."""
    try:
        have = fcntl.fcntl(fd, _F_GET_SEALS)
    except OSError:
        raise OSError(errno.EPERM, "not a sealed memfd") from None
    if have & seals != seals:
        raise OSError(errno.EPERM, f"memfd seals {have:#x} lack {seals:#x}")
    return os.fstat(fd).st_size


class Segment:
    """One connection's shared memory: two rings, one each way (fitring.h)."""

    def __init__(self, mm: mmap.mmap, cap: int):
        self.mm = mm
        self.cap = cap
        self.base = ffi.from_buffer(mm, require_writable=True)
        self.view = memoryview(mm)

    @classmethod
    def create(cls, cap: int, name: str = "fit") -> tuple["Segment", int]:
        size = lib.fr_segment_size(cap)
        fd = sealed_memfd(name, size, _SEAL_SHRINK | _SEAL_GROW | _SEAL_SEAL)
        try:
            mm = mmap.mmap(fd, size)
        except OSError:
            os.close(fd)
            raise
        if lib.fr_format(ffi.from_buffer(mm, require_writable=True), size, cap) < 0:
            os.close(fd)
            raise ValueError(f"no ring of {cap} bytes")
        return cls(mm, cap), fd

    @classmethod
    def open(cls, fd: int) -> "Segment":
        size = check_sealed(fd, _SEAL_SHRINK)
        mm = mmap.mmap(fd, size)
        cap = lib.fr_check(ffi.from_buffer(mm, require_writable=True), size)
        if cap < 0:
            mm.close()
            raise OSError(errno.EPROTO, "not a FIT segment")
        return cls(mm, cap)

    def set_model(self, latency_ns: int, bytes_per_s: int) -> None:
        """Both rings' interconnect model (fitring.h): each message is due
        latency_ns after its ring has carried it at bytes_per_s (0: no limit)."""
        for which in (0, 1):
            lib.fr_set_model(self.base, which, latency_ns, bytes_per_s)

    def ring(self, which: int, peer_bell: Any, peer_efd: int, keep: Any = None) -> "Ring":
        """peer_bell: the consumer's bell word (a uint32_t *), for a producer;
        keep: what must stay alive as long as the ring (the bell's mapping)."""
        return Ring(self, which, peer_bell, peer_efd, keep)

    def bell_word(self, side: int) -> Any:
        """A channel segment's bell word of `side` (0: the maker's, 1: the other's)."""
        return ffi.cast("fr_segment *", self.base).bell[side]

    def close(self) -> None:
        self.view.release()
        self.base = None
        try:
            self.mm.close()
        except BufferError:   # a message view still lives; the mapping goes with it
            pass


class Ring:
    """One side's handle on one ring of a Segment: it produces or it consumes."""

    __slots__ = ("seg", "r", "_len", "_data", "_view", "_keep")

    def __init__(self, seg: Segment, which: int, peer_bell: Any, peer_efd: int,
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
        rc = lib.fr_send2(self.r, _ptr(head), len(head), _ptr(payload), len(payload))
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise _error(rc, "send")

    def post(self, op: int, head: bytes, payload: Any) -> bool:
        """One ONEWAY message (op; head, then payload), its FIT header written in C
        (fitserve.h: fs_post); False if the ring has no room now."""
        rc = lib.fs_post(self.r, op, head, len(head), _ptr(payload), len(payload))
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise _error(rc, "post")

    def reserve(self, n: int) -> memoryview | None:
        """Room for a message of n bytes, in the ring; None if there is none now."""
        at = lib.fr_reserve(self.r, n)
        if at < 0:
            if at == -errno.EAGAIN:
                return None
            raise _error(at, "reserve")
        start = self._data + at
        return self._view[start:start + n]

    def commit(self, n: int) -> None:
        """Publish the reserved message, its first n bytes."""
        lib.fr_commit(self.r, n)

    def wait_space(self, n: int, own_efd: int, spin_s: float, timeout_s: float) -> bool:
        """Until a message of n bytes fits (True) or timeout_s passes (False)."""
        rc = lib.fr_wait_space(self.r, n, own_efd, int(spin_s * 1e9), _ns(timeout_s))
        if rc == 0:
            return True
        if rc == -errno.ETIMEDOUT:
            return False
        raise _error(rc, "wait for space")

    # ---- consumer ------------------------------------------------------------------
    def peek(self) -> memoryview | None:
        """The next message in place (valid until consume()); None if there is none."""
        at = lib.fr_peek(self.r, self._len)
        if at < 0:
            if at == -errno.EAGAIN:
                return None
            raise _error(at, "peek")
        start = self._data + at
        return self._view[start:start + self._len[0]]

    def consume(self) -> None:
        lib.fr_consume(self.r)

    def view(self, at: int, n: int) -> memoryview:
        """n bytes at `at` in this ring's data (WaitSet.take's message), in place."""
        start = self._data + at
        return self._view[start:start + n]

    def answer(self, rx: "Ring", op: int, seq: int, payload: Any) -> bool:
        """A REPLY (err 0, untraced) with op and seq to the message at rx's front,
        then that message released (fitserve.h); False: no room now, neither done."""
        rc = lib.fs_answer(self.r, rx.r, op, seq, _ptr(payload), len(payload))
        if rc == 0:
            return True
        if rc == -errno.EAGAIN:
            return False
        raise _error(rc, "answer")

    def pending(self) -> bool:
        """Whether the producer published anything not yet consumed (due or not)."""
        return bool(lib.fr_pending(self.r))

    @property
    def modeled(self) -> bool:
        return bool(self.r.modeled)


class Bell:
    """An endpoint's doorbell: its bell word, on a page sealed so that peers can
    map it only to read, and the eventfd producers write when the word is up."""

    def __init__(self) -> None:
        self.page_fd = sealed_memfd("fit-bell", _BELL_BYTES)
        self._mm = mmap.mmap(self.page_fd, _BELL_BYTES)   # our one writable mapping
        fcntl.fcntl(self.page_fd, _F_ADD_SEALS, _SEAL_FUTURE_WRITE | _SEAL_SEAL)
        self._buf = ffi.from_buffer(self._mm, require_writable=True)
        self.word = ffi.cast("uint32_t *", self._buf)
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    @staticmethod
    def peer_word(page_fd: int) -> Any:
        """A peer's bell word (read only: its page is sealed against our writes)."""
        check_sealed(page_fd, _SEAL_SHRINK | _SEAL_FUTURE_WRITE)
        mm = mmap.mmap(page_fd, _BELL_BYTES, prot=mmap.PROT_READ)
        return _Mapped(mm)

    def ring(self) -> None:
        """Wake whoever sleeps on this bell (a thread of this process)."""
        lib.fr_ring_efd(self.efd)

    def close(self) -> None:
        os.close(self.efd)
        os.close(self.page_fd)
        self.word = self._buf = None
        self._mm.close()


class _Mapped:
    """A read-only mapping of a peer's bell page; `ptr` is its bell word. It stays
    mapped as long as a ring refers to it."""

    def __init__(self, mm: mmap.mmap):
        self.mm = mm
        self.ptr = ffi.cast("uint32_t *", ffi.from_buffer(mm))

    def close(self) -> None:
        self.ptr = None
        self.mm.close()


class WaitSet:
    """The consumer rings one waiter looks at, with its bell word and eventfd.
    Assign `rings` when they change (an array is built then, not per wait)."""

    def __init__(self, word: Any, efd: int):
        self.word, self.efd = word, efd
        self._rings: list[Ring] = []
        self._array = ffi.new("fr_ring *[]", 1)
        self._n = 0
        self._start = 0
        self._fds = ffi.new("int[]", 16)
        self._fds_list: list[int] = []
        self._due = ffi.new("uint64_t *")
        self.msg = ffi.new("fs_msg *")   # take()'s message: at, len, plain, kind, op, seq
        self._c = ffi.new("fs_caller *")  # call()'s: this set's rings, bell, fds, landing
        self._c.bell, self._c.efd, self._c.rings = word, efd, self._array
        self._out: Any = None             # (the landing and the fds _c points at, kept
        self._watch: Any = None           # alive while it does)
        self.plain = 0                    # call(), recv(): what came is the reply, plain
        self.op = 0                       # recv(): its op, if plain
        self.due = NEVER   # after arm(): when a message published becomes due

    @property
    def rings(self) -> list[Ring]:
        return self._rings

    @rings.setter
    def rings(self, rings: list[Ring]) -> None:
        self._rings = list(rings)
        self._array = ffi.new("fr_ring *[]", max(1, len(rings)))
        for i, ring in enumerate(rings):
            self._array[i] = ring.r
        self._n = self._c.n = len(rings)
        self._c.rings = self._array
        self._start = 0

    def ready(self) -> int:
        """Index of a ring with a message (fairly: looking on from the last one), or -1."""
        i = lib.fr_ready(self._array, self._n, self._start) if self._n else -1
        if i >= 0:
            self._start = (i + 1) % self._n
        return i

    def take(self, spin_s: float = 0.0, timeout_s: float | None = 0.0) -> int:
        """ready() and that ring's message peeked, its header read, waiting for one
        up to timeout_s as wait() does (no fds) if none is there (fitserve.h: fs_next):
        the ring's index, `msg` describing the message (msg.at < 0: the ring's
        -errno); timeout_s 0: -1 if none; else WOKEN or TIMEOUT as wait() says."""
        i = lib.fs_next(self._array, self._n, self._start, self.word, self.efd,
                        int(spin_s * 1e9), _ns(timeout_s), self.msg)
        if i >= 0:
            self._start = (i + 1) % self._n
            return i
        return TIMEOUT if i == -errno.ETIMEDOUT else -1

    def arm(self) -> bool:
        """True: nothing is due and the bell is up, sleep on the eventfd (then disarm()),
        and wake at `self.due` - DUE_SPIN_NS if a message is published that is not due
        (a model's: self.due is NEVER otherwise); False: something is due, or nearly,
        do not sleep."""
        armed = bool(lib.fr_arm(self._array, self._n, self.word, self._due))
        self.due = self._due[0]
        return armed

    def arm_with(self, waker: "Waker | None") -> bool:
        """arm() for an outside loop that sleeps on `waker` (None: on the eventfd):
        a message published but not yet due sets the waker's timer DUE_SPIN_NS
        before its due time (the loop then spins to it). With no waker there is no
        timer: the bell goes down and False says do not sleep."""
        if not self.arm():
            return False
        if self.due == NEVER:
            return True
        if waker is None:
            self.disarm()
            return False
        waker.at(self.due - DUE_SPIN_NS)
        return True

    def next_due(self) -> int:
        """When the first message published becomes due (CLOCK_MONOTONIC ns): 0 if
        one is now, NEVER if none is published."""
        return lib.fr_next_due(self._array, self._n) if self._n else NEVER

    def disarm(self) -> bool:
        """Bell down, eventfd drained; whether it had been rung."""
        return bool(lib.fr_disarm(self.word, self.efd))

    def calls(self, out: Any, cap: int, fds: list[int], spin_s: float) -> None:
        """What call() uses, set once: replies land in `out` (landing()'s handle, `cap`
        bytes), fds (16 at most) are watched for a hang-up, spin_s is the spin."""
        c = self._c
        self._out, c.out, c.cap = out, out, cap
        watch = ffi.new("int[]", max(1, len(fds[:16])))
        for k, fd in enumerate(fds[:16]):
            watch[k] = fd
        self._watch, c.fds, c.nfds, c.spin_ns = watch, watch, len(fds[:16]), int(spin_s * 1e9)

    def call(self, tx: Ring | None, op: int, seq: int, payload: Any, timeout_s: float) -> int:
        """A REQUEST (op, seq, payload) on tx and the wait for what comes back on
        rings[0] (fitserve.h: fs_call), as calls() set it up: its length, read into
        the landing, and self.plain says whether it is the reply to seq, well-formed,
        err 0; SENT: sent, the wait ended otherwise; UNSENT: tx had no room (nothing
        sent). RingBroken if a ring is. tx None: the request is out already, only the
        wait."""
        c = self._c
        c.start = self._start
        rc = lib.fs_call(c, ffi.NULL if tx is None else tx.r, op, seq, _ptr(payload),
                         len(payload), _ns(timeout_s))
        if rc == lib.FC_REPLY:
            self.plain = c.plain
            return c.len
        if rc < 0:
            raise _error(rc, "call")
        return SENT if rc == lib.FC_SENT else UNSENT

    def caller(self) -> Any:
        """The fs_caller call() uses (fitserve.h), for a native call of another's that
        makes the same call (native/xcmiss.h); length() is then what it read."""
        self._c.start = self._start
        return self._c

    def length(self) -> int:
        return self._c.len

    def recv(self, timeout_s: float) -> int:
        """The next message of rings[0] (a channel's), waiting for it up to timeout_s
        as calls() set the wait up, read into the landing and consumed (fitserve.h:
        fs_recv): its length, and self.plain says whether it is a well-formed,
        untraced one-way message with err 0 (self.op its op); SENT: none came, or
        one too large for the landing (left in its ring). RingBroken if it is."""
        c = self._c
        rc = lib.fs_recv(c, _ns(timeout_s))
        if rc == lib.FC_REPLY:
            self.plain, self.op = c.plain, c.op
            return c.len
        if rc < 0:
            raise _error(rc, "recv")
        return SENT

    def wait(self, spin_s: float, timeout_s: float | None, fds: list[int] | None = None) -> int:
        """A ring index with a message; len(rings) + k if fds[k] hung up; WOKEN if
        woken with nothing to read (or by a signal); TIMEOUT."""
        fds = fds or []
        if fds != self._fds_list:
            self._fds_list = list(fds[:16])
            for k, fd in enumerate(self._fds_list):
                self._fds[k] = fd
        i = lib.fr_wait(self._array, self._n, self._start, self.word, self.efd, self._fds,
                        len(self._fds_list), int(spin_s * 1e9), _ns(timeout_s))
        if 0 <= i < self._n:
            self._start = (i + 1) % self._n
            return i
        if i >= self._n:
            return i
        return TIMEOUT if i == -errno.ETIMEDOUT else WOKEN


class Waker:
    """One fd an outside loop (epoll, select, asyncio) sleeps on for rings with a
    model: readable when `efd` (a bell's eventfd) is rung, or once the time that
    at() set has come (a timerfd; both in an epoll set, whose fd is readable when
    either is). at(0) disarms the timer; the eventfd is drained as before."""

    def __init__(self, efd: int):
        self.tfd = lib.fr_timer_new()
        if self.tfd < 0:
            raise OSError(-self.tfd, "timerfd_create")
        self._ep = select.epoll()
        self._ep.register(efd, select.EPOLLIN)
        self._ep.register(self.tfd, select.EPOLLIN)

    def fileno(self) -> int:
        return self._ep.fileno()

    def at(self, at_ns: int) -> None:
        lib.fr_timer_at(self.tfd, at_ns)

    def close(self) -> None:
        self._ep.close()
        os.close(self.tfd)


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of due times."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def spin_yield() -> bool:
    """Yield the CPU once while spinning: False once the CPU is contended (stop
    spinning and sleep): another task held it FR_CONTENDED_SLICE_NS or more in one
    yield, or FR_CONTENDED_NS or more in each of FR_CONTENDED_TURNS yields of this
    thread in a row (fitring.h says why one shorter yield is not contention)."""
    return bool(lib.fr_spin_yield())


def landing(n: int) -> tuple[memoryview, Any]:
    """n bytes for WaitSet.call to read a reply into: their view, and their handle."""
    ptr = ffi.new("char[]", n)   # (the view keeps it alive, whatever the order of teardown)
    return memoryview(ffi.buffer(ptr)), ptr


def header_constants(magic: int, version: int, request: int, reply: int, oneway: int,
                     max_payload: int) -> None:
    """The FIT header's constants, as its owner states them, for WaitSet.take and
    Ring.answer (fitserve.h); once, before either."""
    lib.fs_init(magic, version, request, reply, oneway, max_payload)


def _ptr(data: Any) -> Any:
    return data if type(data) is bytes else ffi.from_buffer(data)


def _ns(timeout_s: float | None) -> int:
    return -1 if timeout_s is None else max(0, int(timeout_s * 1e9))


def _error(rc: int, what: str) -> OSError:
    if rc == -errno.EBADMSG:
        return RingBroken(f"FIT ring {what}: the peer broke the ring")
    return OSError(-rc, f"FIT ring {what}: {os.strerror(-rc)}")
