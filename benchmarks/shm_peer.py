"""A plain child process at the other end of two of FIT's rings (native/fitring.c),
for the benchmarks' floors: the rack's shared-memory hops with no FIT code.

    with ShmPeer(role, spin_s, *args) as peer:   the child, started; stopped by PID
        peer.tx, peer.rx                         this side's rings (ring 0 ours)
        peer.waitset, peer.hup                   wait for the child's messages, and
                                                 see it hang up
        peer.call(payload, spin_s)               one message there and its answer
                                                 back (the answer, copied)
    roles (the child's loop, each message answered on ring 1):
        echo                    the message itself
        connect NIC             "IP PORT": a kernel socket bound to NIC connects
                                there; the answer is the errno, as text ("0":
                                connected). What the nComponent's data plane
                                does (native/skelconnect.h), no more: the socket
                                was made before the request (non-blocking, its
                                port chosen at connect), and the CPU is held
                                (SCHED_FIFO, where allowed) from the connect
                                until the answer is out
        connect NIC, "close"    the socket connected last is closed and the
                                next one made; the answer is "0" (a program's
                                close(), a call of its own as on the rack)
        stream                  a message <I> size (1..STREAM_MAX): sends zeros
                                size bytes at a time, as fast as the ring takes
                                them, until the next message, which it answers
                                with an empty one; the sends are packed, as the
                                stub packs held sends: one copy each into a
                                message of up to STREAM_PACK_BYTES

A waiter spins up to `spin_s` (yielding the CPU, and no longer once another
task held it long: fitring's spin_yield), then sleeps on its eventfd, as
every FIT waiter does (FIT's rack.poll_us). An empty message tells the child
to stop spinning until the next one (the end of a batch). The child dies
with its parent (PR_SET_PDEATHSIG) and when its socket to it hangs up.
"""

import ctypes
import errno
import os
import signal
import socket
import struct
import subprocess
import sys

from native.fitring import TIMEOUT, WOKEN, Ring, Segment, WaitSet

RING_BYTES = 1 << 20     # each ring of a floor's segment
STREAM = struct.Struct("<I")   # the stream role's request: the size of each send
STREAM_MAX = 64 * 1024         # ... at most (bench tcp's sizes go this far)
STREAM_PACK_BYTES = 64 * 1024  # the sends one message of the stream role packs
WAIT_S = 10.0            # a wait longer than this: the other side is stuck
_PR_SET_PDEATHSIG = 1
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
_SCHED_DEADLINE = 6   # (os has no name for it)


class ShmPeer:
    def __init__(self, role: str, spin_s: float, *args: str):
        self.role, self.spin_s, self.args = role, spin_s, args
        self.proc: subprocess.Popen | None = None
        self.seg: Segment | None = None
        self.efds: list[int] = []
        self.hup: socket.socket | None = None

    def start(self) -> "ShmPeer":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> "ShmPeer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        seg, seg_fd = Segment.create(RING_BYTES, f"floor {self.role}")
        self.seg = seg
        flags = os.EFD_NONBLOCK | os.EFD_CLOEXEC
        self.efds = [os.eventfd(0, flags), os.eventfd(0, flags)]   # this side's, the child's
        mine, theirs = socket.socketpair()   # each side sees the other's hang-up
        self.hup = mine
        fds = [seg_fd, self.efds[1], self.efds[0], theirs.fileno()]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.shm_peer", str(os.getpid()),
                 str(self.spin_s), self.role, *map(str, fds), *self.args],
                pass_fds=fds, stdin=subprocess.DEVNULL, cwd="/")
        finally:
            os.close(seg_fd)
            theirs.close()
        self.tx = seg.ring(0, seg.bell_word(1), self.efds[1])
        self.rx = seg.ring(1, None, self.efds[1])
        self.waitset = WaitSet(seg.bell_word(0), self.efds[0])
        self.waitset.rings = [self.rx]

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def wait(self, spin_s: float) -> None:
        """Until a message from the child waits in rx (RuntimeError if it is gone)."""
        assert self.hup is not None
        while (got := self.waitset.wait(spin_s, WAIT_S, [self.hup.fileno()])) != 0:
            if got != WOKEN:
                what = "timed out" if got == TIMEOUT else "hung up"
                raise RuntimeError(f"the {self.role} floor child {what}")

    def call(self, payload: bytes, spin_s: float) -> bytes:
        if not self.tx.send(payload):
            raise RuntimeError(f"the {self.role} floor's ring is full: its child is stuck")
        self.wait(spin_s)
        answer = bytes(self.rx.peek())
        self.rx.consume()
        return answer

    def rest(self) -> None:
        """The end of a batch: the child stops spinning until the next message."""
        self.tx.send(b"")

    def close(self) -> None:
        """Stop the child by its PID (SIGKILL, reaped); release this side. Idempotent."""
        try:
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait()
        finally:
            self.proc = None
            if self.hup is not None:
                self.hup.close()
                self.hup = None
            for fd in self.efds:
                os.close(fd)
            self.efds = []
            if self.seg is not None:
                self.seg.close()
                self.seg = None


# ---- the child ----------------------------------------------------------------------------
def _serve(role: str, spin_s: float, seg_fd: int, my_efd: int, peer_efd: int, hup_fd: int,
           args: list[str]) -> None:
    seg = Segment.open(seg_fd)
    rx = seg.ring(0, None, peer_efd)
    tx = seg.ring(1, seg.bell_word(0), peer_efd)
    waitset = WaitSet(seg.bell_word(1), my_efd)
    waitset.rings = [rx]
    if role == "stream":
        _stream(rx, tx, waitset, my_efd, hup_fd)
        return
    role_object = _Echo() if role == "echo" else _Connector(args[0])
    answer, after = role_object.answer, role_object.after
    send, peek, consume, wait = tx.send, rx.peek, rx.consume, waitset.wait
    fds, spin = [hup_fd], 0.0   # asleep until the first message of a batch
    while True:
        got = wait(spin, None, fds)
        if got != 0:
            if got == WOKEN:
                continue
            return   # the measuring side hung up
        msg = peek()
        if msg is None:
            continue
        if not len(msg):   # the end of a batch
            spin = 0.0
            consume()
            continue
        spin = spin_s
        out = answer(msg)
        while not send(out):
            tx.wait_space(len(out), my_efd, 0.0, WAIT_S)
        consume()
        after()


def _stream(rx: Ring, tx: Ring, waitset: WaitSet, my_efd: int, hup_fd: int) -> None:
    """The stream role: each request streams until the next message (the stop)."""
    while True:
        got = waitset.wait(0.0, None, [hup_fd])
        if got != 0:
            if got == WOKEN:
                continue
            return   # the measuring side hung up
        msg = rx.peek()
        if msg is None:
            continue
        size = STREAM.unpack(msg)[0] if len(msg) == STREAM.size else 0
        rx.consume()
        if not 0 < size <= STREAM_MAX:
            continue   # not a request: nothing is streamed, nothing answered
        chunk, n = bytes(size), max(1, STREAM_PACK_BYTES // size) * size
        while not rx.pending():   # until the stop
            room = tx.reserve(n)
            if room is None:
                tx.wait_space(n, my_efd, 0.0, 0.01)   # and look for the stop anon
                continue
            for at in range(0, n, size):   # one copy a send, as into a stub's ring
                room[at:at + size] = chunk
            tx.commit(n)
        rx.peek()
        rx.consume()
        while not tx.send(b""):   # the stop's answer: nothing more follows
            tx.wait_space(0, my_efd, 0.0, WAIT_S)


class _Echo:
    def answer(self, msg: memoryview) -> memoryview:
        return msg

    def after(self) -> None:
        pass


class _Connector:
    def __init__(self, nic: str):
        self.nic = nic
        self.sock: socket.socket | None = None   # connected, until its answer is out
        self.ready = self._make()                # the next request's
        self.request, self.address = b"", ("", 0)
        # The CPU held as the data plane holds it: not if real-time already, then
        # given back to the policy it had; off at the first refusal.
        self.policy = os.sched_getscheduler(0)
        self.hold = (self.policy & ~os.SCHED_RESET_ON_FORK) not in (
            os.SCHED_FIFO, os.SCHED_RR, _SCHED_DEADLINE)
        self.held = False

    def _make(self) -> socket.socket:
        sock = socket.socket()
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((self.nic, 0))
        return sock

    def _close(self) -> None:
        """The socket connected last closed (its peer sees EOF now), the next one made."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.ready is None:
            self.ready = self._make()

    def answer(self, msg: memoryview) -> bytes:
        if msg == b"close":
            self._close()
            return b"0"
        if self.sock is not None:   # (a connect with no close between)
            self._close()
        if msg != self.request:   # (a batch asks for the same address each time)
            ip, port = bytes(msg).split()
            self.request, self.address = bytes(msg), (ip.decode(), int(port))
        self.sock, self.ready = self.ready, None
        if self.hold:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
                self.held = True
            except OSError:   # no CAP_SYS_NICE: as the data plane, on without
                self.hold = False
        err = self.sock.connect_ex(self.address)
        if err in (errno.EINPROGRESS, errno.EAGAIN):
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return str(err).encode()

    def after(self) -> None:   # the answer is out
        if self.held:
            os.sched_setscheduler(0, self.policy, os.sched_param(0))
            self.held = False


def _main(argv: list[str]) -> None:
    parent, spin_s, role = int(argv[0]), float(argv[1]), argv[2]
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:   # it died before prctl took effect
        sys.exit(0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C: the parent stops us
    fds = [int(a) for a in argv[3:7]]
    _serve(role, spin_s, *fds, argv[7:])


if __name__ == "__main__":
    _main(sys.argv[1:])
