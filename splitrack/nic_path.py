"""The ordinary path of a rack socket: through a bsdSocketSkeleton on an nComponent.

A `NicPath` is the data half of a connected BsdSocketStub (stub.py) whose
bytes cross a NIC. Its buffers are in the process's rack memory: a receive
ring and a send ring of SOCKET_BUFFER_BYTES each (runtime.buffers), walked in
the same order by the skeleton (monitors/data_paths.py).

- send, DDIO: the bytes are written into the send ring's extCache lines and go
  from there to the skeleton in N_SEND. DMA: they are written, the lines are
  flushed to the mComponent, and N_SEND_DMA tells the skeleton to load them
  (the paper's Fig. 5, steps 1-5).
- receive, DDIO: the skeleton's bytes (STUB_DATA) are placed into the receive
  ring's extCache lines. DMA: the skeleton wrote them into the mComponent
  (STUB_DATA_DMA); the stale lines are dropped and the read misses to it.
- windows: at most SOCKET_BUFFER_BYTES unconsumed each way; consumed bytes
  go back as N_CREDIT in batches, sent ones come back as STUB_SENT.

Every method runs with the stub's lock held (stub.py); the VirtualMemory lock
is taken inside, always after it.
"""

from typing import Any

from fit_rpc import Op
from fit_rpc.netpath import SK, SK_N, ring_pieces
from splitrack.params import SOCKET_BUFFER_BYTES, SOCKET_CREDIT_BYTES


class NicPath:
    def __init__(self, stub: Any, mode: str):
        self.stub = stub
        self.rt = stub._rt
        self.vm = self.rt.vm
        self.name = mode
        self.buffers = self.rt.buffers(mode)
        self.n: str | None = None     # the nComponent holding the skeleton
        self.sk = 0                   # the skeleton's id there
        self.rhead = self.rtail = self.unacked = 0   # receive ring: read, arrived, to credit
        self.tpos = 0                                # send ring: written
        self.credit = SOCKET_BUFFER_BYTES            # send window left

    # ---- receiving ------------------------------------------------------------------------
    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        """Up to `want` buffered bytes (bytes, or a count read into `view`); None: none."""
        avail = self.rtail - self.rhead
        if not avail:
            return None
        k = min(want, avail)
        out = bytearray(k) if view is None else view[:k]
        self._ring_io(self.buffers["rbuf"], self.rhead, memoryview(out), self.vm.read_into)
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
        if op == Op.STUB_DATA:
            data = payload[SK.size:]
            self._ring_io(self.buffers["rbuf"], self.rtail, data, self.vm.write)
            self.rtail += len(data)
            self.stub._ring()
        elif op == Op.STUB_DATA_DMA:
            n = SK_N.unpack_from(payload)[1]
            for addr, k in ring_pieces(self.buffers["rbuf"], self.rtail, n):
                self.vm.written_elsewhere(addr, k)
            self.rtail += n
            self.stub._ring()
        elif op == Op.STUB_SENT:
            self.credit += SK_N.unpack_from(payload)[1]
            self.stub._cond.notify_all()

    # ---- sending ------------------------------------------------------------------------------
    def put(self, chunk: memoryview) -> int:
        """Send what the window allows now; returns how many bytes (0: the window is full)."""
        n = min(self.credit, len(chunk))
        if not n:
            return 0
        chunk = chunk[:n]
        tbuf = self.buffers["tbuf"]
        self._ring_io(tbuf, self.tpos, chunk, self.vm.write)
        if self.buffers["mode"] == "dma":
            for addr, k in ring_pieces(tbuf, self.tpos, n):
                self.vm.flush(addr, k)
            self.rt.send(self.n, Op.N_SEND_DMA, SK_N.pack(self.sk, n))
        else:  # dDDIO: the lines' bytes go to the skeleton in the message. They are the
            # bytes just written, so they are not read back out of the lines.
            self.rt.send(self.n, Op.N_SEND, SK.pack(self.sk) + chunk)
        self.tpos += n
        self.credit -= n
        return n

    def can_send(self) -> bool:
        return self.credit > 0

    # ---- waiting: the process's inbox brings what the skeleton says (runtime.wait) -----------
    def wait_readable(self, deadline: float | None) -> bool:
        return self.rt.wait(self.stub._readable, deadline, self.stub._park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        return self.rt.wait(self.stub._can_send, deadline, self.stub._park_writable)

    # ---- the end ------------------------------------------------------------------------------
    def release(self) -> None:
        """The buffers back to the runtime (the socket closed, or never connected)."""
        if self.buffers is not None:
            self.rt.free_buffers(self.buffers)
            self.buffers = None

    def _ring_io(self, ring: list[int], pos: int, view: memoryview, copy: Any) -> None:
        at = 0
        for addr, k in ring_pieces(ring, pos, len(view)):
            copy(addr, view[at:at + k])
            at += k
