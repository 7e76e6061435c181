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
    ring.post(op, head, payload[, counts]) -> bool
                                       a ONEWAY message, its header written in C
                                       (counted in `counts`, a Counts' handle)
    ring.request(op, seq, payload) -> bool  a REQUEST the same way (its reply waited
                                       for apart: WaitSet.call with tx None)
    ring.reserve(n) -> memoryview      room for n bytes in the ring; then ring.commit(n)
    ring.wait_space(n, own_efd, spin_s, timeout_s) -> bool
    ring.peek() -> memoryview | None   the next message, in place; ring.consume() after
    waitset = WaitSet(bell)            the rings one consumer waits on, and its bell
    waitset.rings = [...]; waitset.wait(spin_s, timeout_s, fds) -> index | WOKEN | TIMEOUT
    waitset.calls(out, cap, fds, spin_s[, counts])
                                       what its calls need, set once: the landing
                                       for replies (landing(cap)'s handle), the fds
                                       to watch, the spin (and where call() and
                                       recv() count)
    counts = Counts(); counts.taken() -> [(op, tx_msgs, tx_bytes, rx_msgs, rx_bytes)]
                                       a link's or a channel end's counts, kept in C
                                       (fitcounts.py)
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
    ring.answer(rx, op, seq, payload[, counts, nrx]) -> bool
                                       a REPLY to rx's front message, then that message
                                       released, in one native call (both counted in
                                       counts); False: no room now
    ring.release(counts, op, n)        consume(), the message counted rx (fs_release)
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
    spin_yield(spun_s) -> bool         a spinner's yield: False once the CPU is
                                       contended (fitring.h: fr_spin_yield)

C return codes become exceptions in one place (ring.py's `ring_error`) and nowhere
else: a ring its peer broke (-EBADMSG) raises RingBroken, a message no ring can
hold (-EMSGSIZE) OSError(EMSGSIZE), a signal that ends a native program's call
in a wait (-EINTR) Interrupted. A memoryview a ring hands out points into
shared memory: it is valid until consume() (or commit()), and its bytes may
change if the peer misbehaves -- copy what must be kept.

This file is the binding's face (every name above is importable from it) and
the shared memory: sealed memfds, a connection's Segment, an endpoint's Bell.
The Ring, with the C module's handle and its return codes, is ring.py's; the
WaitSet and the Waker are waitset.py's; Counts is fitcounts.py's.
"""

import errno
import fcntl
import mmap
import os
import time
from typing import Any

from native.fitcounts import Counts
from native.ring import Interrupted, Ring, RingBroken, ffi, lib
from native.waitset import DUE_SPIN_NS, NEVER, SENT, TIMEOUT, UNSENT, WOKEN, WaitSet, Waker

__all__ = ["Segment", "Ring", "Bell", "WaitSet", "Waker", "Counts", "RingBroken", "Interrupted",
           "WOKEN", "TIMEOUT", "SENT", "UNSENT", "NEVER", "DUE_SPIN_NS", "spin_yield", "now_ns",
           "landing", "header_constants"]

_F_ADD_SEALS, _F_GET_SEALS = 1033, 1034
_SEAL_SEAL, _SEAL_SHRINK, _SEAL_GROW, _SEAL_FUTURE_WRITE = 1, 2, 4, 16
_BELL_BYTES = 4096


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


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns, the clock of due times."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def spin_yield(spun_s: float) -> bool:
    """Yield the CPU once while spinning (for spun_s so far): False once the CPU is
    contended (stop spinning and sleep): another task held it FR_CONTENDED_SLICE_NS
    or more in one yield, or FR_CONTENDED_NS or more in each of FR_CONTENDED_TURNS
    yields of this thread in a row, or the process a call awaits is queued behind
    this thread on its CPU (fitring.h: fr_spin_yield says how, and why)."""
    return bool(lib.fr_spin_yield(int(spun_s * 1e9)))


def landing(n: int) -> tuple[memoryview, Any]:
    """n bytes for WaitSet.call to read a reply into: their view, and their handle."""
    ptr = ffi.new("char[]", n)   # (the view keeps it alive, whatever the order of teardown)
    return memoryview(ffi.buffer(ptr)), ptr


def header_constants(magic: int, version: int, request: int, reply: int, oneway: int,
                     max_payload: int) -> None:
    """The FIT header's constants, as its owner states them, for WaitSet.take,
    Ring.answer, Ring.post and Ring.request (fitserve.h); once, before any."""
    lib.fs_init(magic, version, request, reply, oneway, max_payload)
