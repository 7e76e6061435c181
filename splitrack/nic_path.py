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
- windows: at most a ring's worth unconsumed each way; consumed bytes go
  back as N_CREDIT in batches, sent ones come back as STUB_SENT once the
  skeleton has them in nComponent DRAM.
- message packing (the paper's suggested improvement; on unless the process
  runs with SPLITRACK_PACKING=0): a send that comes while earlier bytes are in
  flight (announced, not yet confirmed) and within PACK_GAP_S of the last
  announcement is *held*; held sends go to the skeleton together, one flush
  and one N_SEND_DMA (or one N_SEND), once PACK_MAX_BYTES are held, the first
  of them has been held PACK_DELAY_S (the next send sends them), the stub
  waits on the socket, STUB_SENT arrives, it shuts down or closes, or the
  runtime's flusher finds them PACK_DELAY_S old (the program stopped
  sending). A program that keeps sending thus sends its batches itself, and
  the flusher's thread seldom needs the interpreter. A held send smaller than
  a line waits in the stub's own buffer (`stage`) until a line's worth is
  there, and goes into the send ring with it in one copy: a small send costs
  an append, not a copy into the extCache. TCP is a byte stream, so nothing a
  peer can rely on changes. A socket with TCP_NODELAY never holds, nor does
  one of a program that selects (the runtime is threaded): such a program
  waits in select(), not on the socket, and a reply it wrote in two sends
  would wait for the flusher.

Traced (`splitrack trace`, fit_rpc/tracing.py): held bytes are announced in
the context of the send that began holding them (`held_trace`), whoever
announces them (a later call, the flusher).

Every method runs with the stub's lock held (stub.py), except the waits,
which take it themselves; the VirtualMemory lock is taken inside, always
after it.
"""

import errno
import socket as _socket_module
import time
from typing import Any

from fit_rpc import Op, tracing
from fit_rpc.netpath import SK_N, ring_pieces
from splitrack.params import (
    PACK_DELAY_S,
    PACK_GAP_S,
    PACK_MAX_BYTES,
    SOCKET_CREDIT_BYTES,
    SOCKET_SEND_BUFFER_BYTES,
)

_NODELAY = (_socket_module.IPPROTO_TCP, _socket_module.TCP_NODELAY)
_clock = time.monotonic


class NicPath:
    def __init__(self, stub: Any, mode: str):
        self.stub = stub
        self.rt = stub._rt
        self.vm = self.rt.vm
        self.name = mode
        self.buffers = self.rt.buffers(mode)
        self._rbuf, self._tbuf = tuple(self.buffers["rbuf"]), tuple(self.buffers["tbuf"])
        xc = self.vm.xc
        self._hit_read, self._hit_write = xc.read_into, xc.write_from
        self._slot, self._pid = self.vm.slot, self.vm.pid
        self.n: str | None = None     # the nComponent holding the skeleton
        self.sk = 0                   # the skeleton's id there
        self.rhead = self.rtail = self.unacked = 0   # receive ring: read, arrived, to credit
        self.tpos = 0                                # send ring: written
        self.stage = bytearray()                     # ... small held sends, not in it yet
        self._line = self.vm.line
        self.credit = SOCKET_SEND_BUFFER_BYTES       # send window left
        self.held = 0                                # ... written, not yet announced (packing)
        self.held_since = 0.0                        # ... when the first of them was written
        self.held_trace: tracing.Context | None = None   # ... in which send (traced)
        self.announced = 0.0                         # ... when bytes last went to the skeleton
        self.packing = self.rt.packing

    # ---- receiving ------------------------------------------------------------------------
    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        """Up to `want` buffered bytes (bytes, or a count read into `view`); None: none."""
        avail = self.rtail - self.rhead
        if not avail:
            return None
        k = min(want, avail)
        out = bytearray(k) if view is None else view[:k]
        self._ring_io(self._rbuf, self.rhead, memoryview(out), self._hit_read, self.vm.read_into)
        if not peek:
            self.rhead += k
            self.unacked += k
            if self.unacked >= SOCKET_CREDIT_BYTES:   # the skeleton's window reopens
                self.rt.send(self.n, Op.N_CREDIT, SK_N.pack(self.sk, self.unacked))
                self.unacked = 0
            if self.rhead == self.rtail:
                self.stub._drained()
        return k if view is not None else bytes(out)

    def pushed(self, op: int, payload: memoryview) -> None:
        if op == Op.STUB_DATA:   # n more bytes in the receive ring's lines (dDDIO wrote them)
            self.rtail += SK_N.unpack_from(payload)[1]
            self.stub._ring()
        elif op == Op.STUB_DATA_DMA:   # ... at the home (dDMA): the cached lines are stale
            n = SK_N.unpack_from(payload)[1]
            for addr, k in ring_pieces(self._rbuf, self.rtail, n):
                self.vm.written_elsewhere(addr, k)
            self.rtail += n
            self.stub._ring()
        elif op == Op.STUB_SENT:
            self.credit += SK_N.unpack_from(payload)[1]
            self.announce_held()
            self.stub._cond.notify_all()

    # ---- sending ------------------------------------------------------------------------------
    def put(self, chunk: bytes | memoryview) -> int:
        """Send what the window allows now; returns how many bytes (0: the window is full)."""
        n, credit = len(chunk), self.credit
        if n > credit:
            if not credit:
                return 0
            n, chunk = credit, chunk[:credit]
        held = self.held + n
        if self.packing and held < PACK_MAX_BYTES and not self.rt.threaded \
                and not self.stub._opts.get(_NODELAY):
            now = _clock()
            if held > n:   # a batch is held: it goes on unless it is due
                hold = now - self.held_since < PACK_DELAY_S
            else:          # a new batch, if bytes are in flight and the last went just now
                hold = bool(SOCKET_SEND_BUFFER_BYTES - credit - self.held) \
                    and now - self.announced < PACK_GAP_S
                if hold:
                    self.held_since = now
                    self.held_trace = tracing.current.ctx
                    self.rt.hold(self)
            if hold:
                self._keep(chunk)
                self.credit, self.held = credit - n, held
                return n
        self._unstage()
        self._write(chunk)
        self.credit, self.held = credit - n, held
        try:
            self._announce()
        except BaseException:   # not sent: as if this send() had not happened
            self.tpos -= n
            self.credit += n
            self.held -= n
            raise
        return n

    def _keep(self, chunk: bytes | memoryview) -> None:
        """A held send: a small one waits in the stub's own buffer (`stage`) until a
        line's worth is there, then goes into the send ring in one copy; a large
        one goes in at once, after what is staged."""
        stage = self.stage
        if len(chunk) >= self._line:
            self._unstage()
            self._write(chunk)
            return
        stage += chunk
        if len(stage) >= self._line:
            try:
                self._unstage()
            except BaseException:   # not taken: as if this send() had not happened
                self.stage = self.stage[:-len(chunk)]   # a new one (see _unstage)
                raise

    def _unstage(self) -> None:
        """The staged bytes into the send ring. The stage is replaced, never resized
        after a copy: a failed copy's traceback may still hold views of it."""
        if self.stage:
            data, self.stage = self.stage, bytearray()
            try:
                self._write(data)
            except BaseException:
                self.stage = bytearray(data)
                raise

    def _write(self, chunk: bytes | bytearray | memoryview) -> None:
        """chunk into the send ring's lines at tpos (through the extCache: C while the
        lines are cached; vm, which faults them in, from the first that is not)."""
        n = len(chunk)
        start, size = self._tbuf
        at = self.tpos % size
        if at + n > size or self._hit_write(self._slot, self._pid, start + at, chunk) < n:
            self._ring_io(self._tbuf, self.tpos, chunk, self._hit_write, self.vm.write)
        self.tpos += n

    def announce_held(self) -> None:
        """The held bytes (packing) to the skeleton now, if any. Called where nobody
        could take an error (the flusher, a push, before a wait): a failure breaks
        the connection, and the program's next call on the socket says so."""
        if self.held and self.buffers is not None:
            try:
                if self.held_trace is None:
                    self._announce()
                else:
                    with tracing.within(self.held_trace):
                        self._announce()
            except OSError as exc:
                self.stub._error = self.stub._error or exc.errno or errno.EIO
                self.stub._ring()
                self.stub._cond.notify_all()

    def _announce(self) -> None:
        """The held bytes to the skeleton, in one message: DDIO, N_SEND (the skeleton
        reads them from the send ring's extCache lines); DMA, the lines are flushed
        to the mComponent first, then N_SEND_DMA (the skeleton loads them from there)."""
        self._unstage()
        total, dma = self.held, self.buffers["mode"] == "dma"
        if dma:
            for addr, k in ring_pieces(self._tbuf, self.tpos - total, total):
                self.vm.flush(addr, k)
        self.rt.send(self.n, Op.N_SEND_DMA if dma else Op.N_SEND, SK_N.pack(self.sk, total))
        self.held = 0
        self.announced = _clock()

    def can_send(self) -> bool:
        return self.credit > 0

    # ---- waiting: the process's inbox brings what the skeleton says (runtime.wait) -----------
    def wait_readable(self, deadline: float | None) -> bool:
        self._before_waiting()
        return self.rt.wait(self.stub._readable, deadline, self.stub._park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        self._before_waiting()
        return self.rt.wait(self.stub._can_send, deadline, self.stub._park_writable)

    def _before_waiting(self) -> None:
        if self.held:   # a stub that waits holds nothing back (the answer may depend on it)
            with self.stub._lock:
                self.announce_held()

    # ---- the end ------------------------------------------------------------------------------
    def release(self) -> None:
        """The buffers back to the runtime (the socket closed, or never connected)."""
        if self.buffers is not None:
            self.rt.free_buffers(self.buffers)
            self.buffers = None

    def _ring_io(self, ring: tuple[int, int], pos: int, view: memoryview, hit: Any,
                 copy: Any) -> None:
        """view to or from a ring at stream offset pos: straight through the extCache (C,
        `hit`; the set's lock is all it takes) while the lines are cached, through vm
        (`copy`, which faults lines in) from the first line that is not."""
        start, size = ring
        at = pos % size
        if at + len(view) <= size:   # the usual case: no wrap
            done = hit(self._slot, self._pid, start + at, view)
            if done < len(view):
                copy(start + at + done, view[done:])
            return
        at = 0
        for addr, k in ring_pieces(ring, pos, len(view)):
            copy(addr, view[at:at + k])
            at += k
