"""The ordinary path of a rack socket: through a bsdSocketSkeleton on an nComponent.

A `NicPath` is the data half of a connected BsdSocketStub (stub.py) whose
bytes cross a NIC. Its buffers are in the process's rack memory: a receive
ring of SOCKET_BUFFER_BYTES and a send ring of SOCKET_SEND_BUFFER_BYTES
(runtime.buffers), walked in the same order by the skeleton
(monitors/data_paths.py).

- send, DDIO: the bytes are written into the send ring's extCache lines, and
  N_SEND tells the skeleton how many; it reads them from those lines. DMA:
  they are written, the lines are flushed to the mComponent, and N_SEND_DMA
  tells the skeleton to load them from there (the paper's Fig. 5, steps 1-5).
- receive, DDIO: the skeleton wrote the bytes into the receive ring's extCache
  lines itself (dDDIO) and says how many (STUB_DATA); the read hits them. DMA:
  the skeleton wrote them into the mComponent (STUB_DATA_DMA); the stale lines
  are dropped and the read misses to it.
- the hot path is C (native/stubpath.c): one native call per send() (the
  packing rule, the stage, the copy into the send ring's lines) and per recv()
  (the copy out of the receive ring's lines), over this path's whole state
  (`self.c`, whose fields the rest of this file reads and sets). A line that
  is not cached changes nothing there: it is faulted in (vm.fault) and the
  call made again.
- windows: at most a ring's worth unconsumed each way; consumed bytes go
  back as N_CREDIT in batches, sent ones come back as STUB_SENT once the
  skeleton has them in nComponent DRAM.
- a native program's recv of bytes already there (more than it asks for)
  is taken in C, without the interpreter or the stub's lock (`quick`:
  native/fastrecv.h); what it read goes back at the program's next wait
  (`credit_after_quick`) or the next recv here.
- message packing (the paper's suggested improvement; on unless the process
  runs with SPLITRACK_PACKING=0): a send that comes while earlier bytes are in
  flight (announced, not yet confirmed) and within PACK_GAP_S of the last
  announcement is *held*; held sends go to the skeleton together, one flush
  and one N_SEND_DMA (or one N_SEND), once PACK_MAX_BYTES are held, the first
  of them has been held PACK_DELAY_S (a send soon after sends them: sp_hold
  looks at the clock every few holds), the stub
  waits on the socket, a native program waits at all (poll, select, epoll:
  the runtime is polled), STUB_SENT arrives, it shuts down or closes, or the
  runtime's flusher finds them PACK_DELAY_S old (the program stopped
  sending). A program that keeps sending thus sends its batches itself, and
  the flusher's thread seldom needs the interpreter. A held send smaller than
  a line waits in the stub's own buffer (`stage`) until a line's worth is
  there, and goes into the send ring with it in one copy: a small send costs
  an append, not a copy into the extCache. TCP is a byte stream, so nothing a
  peer can rely on changes. A datagram socket's path never holds (packing
  False: each datagram goes as it is sent). A socket with TCP_NODELAY never holds, nor does
  one of a program whose inbox thread keeps readiness exact (threaded: a
  Python program that selects on fileno()): such a program waits in a
  select() the rack never sees, not on the socket, and a reply it wrote in
  two sends would wait for the flusher. A native program's selects are the
  rack's (polled), and send what is held first.

Traced (`splitrack trace`, fit_rpc/tracing.py): held bytes are announced in
the context of the send that began holding them (`held_trace`), whoever
announces them (a later call, the flusher).

Every method runs with the stub's lock held (stub.py), except the waits,
which take it themselves; the VirtualMemory lock is taken inside, always
after it.
"""

import errno
import socket as _socket_module
from typing import Any

from fit_rpc import Op, tracing
from fit_rpc.netpath import SK_N, ring_pieces
from native import stubpath
from splitrack.params import (
    PACK_DELAY_S,
    PACK_GAP_S,
    PACK_MAX_BYTES,
    SOCKET_CREDIT_BYTES,
    STUB_SEND_PUMP_S,
)

_NODELAY = (_socket_module.IPPROTO_TCP, _socket_module.TCP_NODELAY)
_lib, _from_buffer = stubpath.lib, stubpath.ffi.from_buffer
_put, _take, _unstage, _announced = _lib.sp_put, _lib.sp_take, _lib.sp_unstage, \
    _lib.sp_announced
_credit_due, _credited = _lib.sp_credit_due, _lib.sp_credited
_SENT, _HELD, _HOLDING, _FULL, _MISS, _MISSED = stubpath.SENT, stubpath.HELD, \
    stubpath.HOLDING, stubpath.FULL, stubpath.MISS, stubpath.MISSED
_PUMP_NS = int(STUB_SEND_PUMP_S * 1e9)


class NicPath:
    def __init__(self, stub: Any, mode: str, packing: bool = True,
                 buffers: dict[str, Any] | None = None):
        """buffers: runtime.buffers(mode) taken already (connect() names them in its
        request, and builds the rest while the nComponent connects)."""
        self.stub = stub._face   # (face.py: all of the stub a path may touch)
        self.packing = packing   # sends may be held at all (a datagram socket's never are)
        self.rt = self.stub.runtime
        self.vm = self.rt.vm
        self.name = mode
        self.buffers = buffers or self.rt.buffers(mode)
        self._rbuf, self._tbuf = tuple(self.buffers["rbuf"]), tuple(self.buffers["tbuf"])
        self._send_op = Op.N_SEND_DMA if mode == "dma" else Op.N_SEND
        self.n: str | None = None     # the nComponent holding the skeleton
        self.sk = 0                   # the skeleton's id there
        self.c, self._stage = stubpath.new_path(self.vm.xc, self.vm.slot, self.vm.pid,
                                                self._rbuf, self._tbuf, PACK_MAX_BYTES,
                                                PACK_DELAY_S, PACK_GAP_S)
        self._taken = stubpath.ffi.new("uint64_t *")
        self._pumped = 0                 # when the stub last read its inbox after a send (ns)
        self.pump_due = False            # ... and should again, once its lock is let go
        self.held_trace: tracing.Context | None = None   # held bytes: in which send (traced)
        self.sync_packing()

    def sync_packing(self) -> None:
        """Whether sends may be held (packing): on for this process, no TCP_NODELAY, and
        no inbox thread (threaded: the program's selects are not the rack's). Called
        whenever one of those changes."""
        self.packs = self.c.pack = bool(self.packing and self.rt.packing
                                        and not self.rt.threaded
                                        and not self.stub.option(*_NODELAY))

    # ---- the flusher reads these without the stub's lock (runtime._flush_held) ----------
    @property
    def held(self) -> int:
        """Bytes written or staged, not yet announced."""
        return self.c.held

    @property
    def held_since(self) -> float:
        """When the first of them was taken (time.monotonic())."""
        return self.c.held_since / 1e9

    # ---- receiving ------------------------------------------------------------------------
    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        """Up to `want` buffered bytes (bytes, or a count read into `view`); None: none."""
        c = self.c
        avail = c.rtail - c.rhead
        if not avail:
            return None
        k = min(want, avail)
        out = bytearray(k) if view is None else view[:k]
        buf = _from_buffer(out, require_writable=True)
        done = _take(c, buf, k, 0, peek)
        if done < k:
            try:
                k = self._take_rest(buf, k, done, peek)
            finally:
                c.faulting = 0   # (set by sp_take at the miss: recvs in C wait meanwhile)
            if not k:
                return None
        if view is None and k < len(out):
            del out[k:]
        if not peek:
            if _credit_due(c, SOCKET_CREDIT_BYTES):   # (most reads: no credit due yet)
                self._give_credit()
            if c.rhead == c.rtail:
                self.stub.drained()
        return k if view is not None else bytes(out)

    def take_next(self, want: int, view: memoryview | None, deadline: float | None
                  ) -> Any:
        """A blocking recv's fast lane (receiving.py; the stub's lock not held): the
        process's inbox's next message served by this thread (the skeleton's
        STUB_DATA, most often), then take(); not the stub's wait's layers around the
        same two steps. None for the general way: bytes are buffered already, nothing
        held back may be sent first (packing), another thread reads the inbox,
        nothing came, or it was not for this socket."""
        c = self.c
        if c.held or c.rtail != c.rhead:
            return None   # (bytes there already: take() first, the general way)
        stub = self.stub
        n = self.rt.next_data(stub.id, deadline)   # (this socket's STUB_DATA: as pushed())
        if n < 0:
            return None
        lock = stub.lock
        lock.acquire()   # (not `with`: the hot path)
        try:
            if n:
                if not stub.holds(self):
                    return None   # closed meanwhile: those bytes are nobody's
                c.rtail += n
            got = self.take(want, view, False)
            if c.rtail != c.rhead:
                stub.wake()   # more than this recv took: another waiter may take the rest
            return got
        finally:
            lock.release()

    def _take_rest(self, buf: Any, k: int, done: int, peek: bool) -> int:
        """take() after its first copy stopped short of k bytes at `done`: a line that
        is not cached is faulted in (reading ahead), and the copy goes on; the count
        read. (No miss: a recv in C took the rest first, fastrecv.h.)"""
        c = self.c
        while done < k and c.miss:
            try:
                self.vm.fault(c.miss, _left(self._rbuf, c.miss, k - done))
            except BaseException:
                if not done or peek:
                    raise
                return done   # what was read is the program's: a short read; the fault
                              # (its home unreachable...) comes again at the next recv
            done += _take(c, buf + done, k - done, done if peek else 0, peek)
        return done

    def _give_credit(self) -> None:
        """The skeleton's window reopens by what was read, once a batch of it was
        (if the send fails, those bytes stay unacked)."""
        n = _credit_due(self.c, SOCKET_CREDIT_BYTES)
        if n:
            self.rt.send(self.n, Op.N_CREDIT, SK_N.pack(self.sk, n))
            _credited(self.c, n)

    # ---- a native program's recv without the interpreter (native/fastrecv.h) ------------
    def quick(self) -> Any:
        """This path, whose recvs of bytes already there are now takeable in C from
        its state `c` (sp_take_more); None once released."""
        if self.buffers is None:
            return None
        _lib.sp_fast(self.c, 1)
        return self

    def quick_off(self) -> None:
        """No more of those: once this returns, none is copying (released, broken)."""
        _lib.sp_fast(self.c, 0)

    def credit_after_quick(self) -> None:
        """(a native program's wait; the stub's lock not held) What the recvs in C
        read goes back to the skeleton, once a batch of it was. A failure breaks the
        connection, as announce_held's does."""
        if self.c.fast and self.c.unacked >= SOCKET_CREDIT_BYTES:
            with self.stub.lock:
                if self.c.fast:   # (off: released, or broken and reported)
                    try:
                        self._give_credit()
                    except OSError as exc:
                        self.stub.set_error(exc.errno or errno.EIO)

    def pushed(self, op: int, payload: memoryview) -> None:
        if op == Op.STUB_DATA:   # n more bytes in the receive ring's lines (dDDIO wrote them)
            self.c.rtail += SK_N.unpack_from(payload)[1]
            self.stub.wake()
        elif op == Op.STUB_DATA_DMA:   # ... at the home (dDMA): the cached lines are stale
            n = SK_N.unpack_from(payload)[1]
            for addr, k in ring_pieces(self._rbuf, self.c.rtail, n):
                self.vm.written_elsewhere(addr, k)
            self.c.rtail += n
            self.stub.wake()
        elif op == Op.STUB_SENT:
            self.c.credit += SK_N.unpack_from(payload)[1]
            self.announce_held()
            self.stub.wake_senders()

    # ---- sending ------------------------------------------------------------------------------
    def put(self, chunk: bytes | memoryview) -> int:
        """Send what the window allows now; returns how many bytes (0: the window is full)."""
        c, taken = self.c, self._taken
        verdict = _put(c, chunk if type(chunk) is bytes else _from_buffer(chunk), len(chunk),
                       taken)
        if verdict == _HELD:   # the hot case: a held batch goes on
            return taken[0]
        done = 0
        while True:
            try:
                if verdict == _FULL:
                    return done
                if verdict != _MISS:
                    n = taken[0]
                    self._took(verdict & ~_MISSED, n)   # (failed: as if n had not come)
                    done += n
                    if not verdict & _MISSED or done == len(chunk):   # (a line's worth
                        return done         # may stay staged: it goes before the next bytes)
                self.vm.fault(c.miss, _left(self._tbuf, c.miss, len(chunk) - done))
            except BaseException:
                if done:   # those are sent (or held): a short send, as the kernel's;
                    return done   # the error comes again with the rest
                raise
            verdict = _put(c, _from_buffer(chunk) + done, len(chunk) - done, taken)

    def _took(self, verdict: int, n: int) -> None:
        """What sp_put decided for the n bytes it took: announce them now, or note that
        a new batch is held (the flusher sends it at most PACK_DELAY_S from now)."""
        if verdict == _SENT:
            try:
                self._announce()
            except BaseException:   # not sent: as if these bytes had not come
                c = self.c
                c.tpos -= n
                c.credit += n
                c.held -= n
                raise
        elif verdict == _HOLDING:
            self.held_trace = tracing.current.ctx
            self.rt.hold(self)

    def announce_held(self) -> None:
        """The held bytes (packing) to the skeleton now, if any. Called where nobody
        could take an error (the flusher, a push, before a wait): a failure breaks
        the connection, and the program's next call on the socket says so."""
        if self.c.held and self.buffers is not None:
            try:
                if self.held_trace is None:
                    self._announce()
                else:
                    with tracing.within(self.held_trace):
                        self._announce()
            except OSError as exc:
                _announced(self.c)   # dropped: the connection is broken (no retries)
                self.stub.set_error(exc.errno or errno.EIO)

    def _announce(self) -> None:
        """The held bytes to the skeleton, in one message: DDIO, N_SEND (the skeleton
        reads them from the send ring's extCache lines); DMA, the lines are flushed
        to the mComponent first, then N_SEND_DMA (the skeleton loads them from there)."""
        c = self.c
        while _unstage(c) == _MISS:
            self.vm.fault(c.miss, _left(self._tbuf, c.miss, c.staged))
        total = c.held
        if self._send_op == Op.N_SEND_DMA:
            for addr, k in ring_pieces(self._tbuf, c.tpos - total, total):
                self.vm.flush(addr, k)
        self.rt.send(self.n, self._send_op, SK_N.pack(self.sk, total))
        _announced(c)
        if c.announced - self._pumped > _PUMP_NS:   # a program that only sends hears its
            self.pump_due = True                    # skeleton too (stub.py pumps, unlocked)

    def pending(self) -> int:
        return self.c.rtail - self.c.rhead

    def can_send(self) -> bool:
        return self.c.credit > 0

    def roomy(self) -> bool:
        return 3 * self.c.credit >= self.c.tsize

    def pump(self) -> None:
        """Read the process's inbox now (the stub's lock not held): a program that only
        sends, never waiting, still hears its skeleton -- a reset makes its next send
        fail within about STUB_SEND_PUMP_S, as a Linux send fails after a RST, rather
        than once its whole window is spent."""
        self.pump_due = False
        self._pumped = _lib.sp_now()
        self.rt.pump()

    # ---- waiting: the process's inbox brings what the skeleton says (runtime.wait) -----------
    def wait_readable(self, deadline: float | None) -> bool:
        self._before_waiting()
        return self.rt.wait(self.stub.readable, deadline, self.stub.park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        self._before_waiting()
        return self.rt.wait(self.stub.can_send, deadline, self.stub.park_writable)

    def _before_waiting(self) -> None:
        if self.c.held:   # a stub that waits holds nothing back (the answer may depend on it)
            with self.stub.lock:
                self.announce_held()

    # ---- the end ------------------------------------------------------------------------------
    def shutdown(self, how: int) -> None:
        pass   # the stub tells the skeleton itself (N_SHUTDOWN), after announce_held()

    def release(self) -> None:
        """The buffers back to the runtime (the socket closed, or never connected)."""
        self.quick_off()
        self.rt.unhold(self)
        if self.buffers is not None:
            self.rt.free_buffers(self.buffers)
            self.buffers = None


def _left(ring: tuple[int, int], addr: int, n: int) -> int:
    """At most n bytes from addr, not past the ring's end (what a fault may read ahead)."""
    return max(1, min(n, ring[0] + ring[1] - addr))
