"""A consumer's wait on its FIT rings, part of the fitring binding (native/fitring.py).

Interface (native/fitring.py's docstring has the whole binding's):
    waitset = WaitSet(word, efd)       the rings one consumer waits on, and its bell
    waitset.rings = [...]              (an array is built then, not per wait)
    waitset.ready() -> index | -1
    waitset.wait(spin_s, timeout_s, fds) -> index | len(rings) + k | WOKEN | TIMEOUT
    waitset.take(spin_s, timeout_s) -> index | -1 | WOKEN | TIMEOUT; waitset.msg
    waitset.calls(out, cap, fds, spin_s[, counts]); waitset.call(tx, op, seq, payload, timeout_s)
                                       -> n | SENT | UNSENT; waitset.plain
    waitset.recv(timeout_s) -> n | SENT; waitset.plain, waitset.op
    waitset.arm() -> bool; waitset.due; waitset.arm_with(waker); waitset.next_due()
    waitset.disarm() -> bool
    waker = Waker(efd)                 one fd for an outside loop: the eventfd, or the
                                       time waker.at(ns) set
    take() and recv() raise ring.py's Interrupted when a signal handler ended the call
    they wait in with EINTR (a native program's accept, recv or send: fitring.h,
    fr_signal_ends_call); wait(), a call's, takes a signal for a wake-up

take, call and recv are one native call each (fitserve.h: fs_next, fs_call,
fs_recv); what they read lands in `msg`, or in the landing calls() set. C
return codes become exceptions in ring.py's `ring_error`, as for a Ring.
"""

import errno
import os
import select
from typing import Any

from native.ring import Ring, ffi, lib, ns_of, ring_error

WOKEN = -1     # WaitSet.wait: woken with nothing to read (a doorbell with nothing behind it)
TIMEOUT = -2   # WaitSet.wait: the timeout passed
SENT = -3      # WaitSet.call: the request is out, nothing came back for it yet
UNSENT = -4    # WaitSet.call: the ring had no room, nothing was sent
NEVER = lib.FR_NEVER              # a due time: nothing is published
DUE_SPIN_NS = lib.FR_DUE_SPIN_NS  # a waiter this close to a due time spins to it


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
        self._counts: Any = None
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
        i = lib.fs_next(self._array, self._n, self._start, self.word, self.efd,   # (ns_of
                        int(spin_s * 1e9), -1 if timeout_s is None else   # inline: this
                        int(timeout_s * 1e9) if timeout_s > 0 else 0, self.msg)  # is hot)
        if i >= 0:
            self._start = (i + 1) % self._n
            return i
        if i == -errno.EINTR:   # (a native program's call that ends with EINTR)
            raise ring_error(i, "wait")
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

    def calls(self, out: Any, cap: int, fds: list[int], spin_s: float,
              counts: Any = ffi.NULL, peer: int = 0) -> None:
        """What call() and recv() use, set once: replies land in `out` (landing()'s
        handle, `cap` bytes), fds (16 at most) are watched for a hang-up, spin_s is
        the spin; call() and recv() count what they did in full in `counts` (a
        Counts' handle: fitcounts.py); `peer`, the pid that answers (0: unknown),
        is where a long spin looks (fitring.h: fr_spin_yield)."""
        c = self._c
        c.peer = peer
        self._counts = c.counts = counts
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
        rc = lib.fs_call(c, ffi.NULL if tx is None else tx.r, op, seq,   # (ptr_of, ns_of
                         payload if type(payload) is bytes else ffi.from_buffer(payload),
                         len(payload), int(timeout_s * 1e9) if timeout_s > 0 else 0)  # inline)
        if rc == lib.FC_REPLY:
            self.plain = c.plain
            return c.len
        if rc < 0:
            raise ring_error(rc, "call")
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
        rc = lib.fs_recv(c, int(timeout_s * 1e9) if timeout_s > 0 else 0)   # (ns_of inline)
        if rc == lib.FC_REPLY:
            self.plain, self.op = c.plain, c.op
            return c.len
        if rc < 0:
            raise ring_error(rc, "recv")
        return SENT

    def wait(self, spin_s: float, timeout_s: float | None, fds: list[int] | None = None) -> int:
        """A ring index with a message; len(rings) + k if fds[k] hung up; WOKEN if
        woken with nothing to read (or by a signal: a call's reply is waited for
        through one); TIMEOUT."""
        fds = fds or []
        if fds != self._fds_list:
            self._fds_list = list(fds[:16])
            for k, fd in enumerate(self._fds_list):
                self._fds[k] = fd
        i = lib.fr_wait(self._array, self._n, self._start, self.word, self.efd, self._fds,
                        len(self._fds_list), int(spin_s * 1e9), ns_of(timeout_s))
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
