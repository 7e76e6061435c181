"""The nComponent's two data paths between its DRAM and a process (the paper, Fig. 5).

dDDIO (`Ddio`): bytes move between nComponent DRAM and the process's extCache
directly. A receive pushes the bytes to the stub (STUB_DATA), which places
them in the extCache lines of its receive buffer; a send brings them from the
stub's extCache lines in the message (N_SEND). No mComponent traffic.

dDMA (`Dma`): bytes move between nComponent DRAM and the mComponent that holds
the stub's buffers. A receive is written into the mComponent at the receive
buffer's address (M_DMA_WRITE), then the stub hears the size (STUB_DATA_DMA)
and reads the bytes through its extCache, which misses to the mComponent. A
send is flushed by the stub to the mComponent first; the skeleton loads it
from there (M_DMA_READ) on N_SEND_DMA.

Every push names the stub by the id its process gave it (`skel.stub`).
Both buffers are rings in the process's virtual memory: `rbuf`/`tbuf`
(address, length) at mComponent `home`. Stub and skeleton walk them in the
same order, so a message carries only a length.

A dDMA call waits for the mComponent while the nMonitor keeps serving its inbox
(fit_rpc.Endpoint); a skeleton closed meanwhile is seen (`skel.dead`), loads
queue so that a nested N_SEND_DMA cannot overtake an earlier one, and a nested
N_SHUTDOWN or N_CLOSE waits for the loads (`Skeleton.busy`). A dDMA that fails
(the process ended and its memory is gone) breaks the connection, not the
nMonitor.
"""

import errno
from collections import deque
from typing import Any

from fit_rpc import Op
from fit_rpc.netpath import DMA, SK, SK_ERR, SK_N, ring_pieces


class Ddio:
    name = "ddio"

    def __init__(self, net: Any):
        self.net = net

    def deliver(self, skel: Any, n: int) -> None:
        self.net.push(skel, Op.STUB_DATA, SK.pack(skel.stub) + skel.rx.get(n))

    def load(self, skel: Any, payload: memoryview) -> None:
        skel.send(payload)

    def confirm(self, skel: Any, n: int) -> None:
        self.net.push(skel, Op.STUB_SENT, SK_N.pack(skel.stub, n))

    def closed(self, skel: Any, err: int) -> None:
        self.net.push(skel, Op.STUB_CLOSED, SK_ERR.pack(skel.stub, err))

    def busy(self) -> bool:
        return False   # the bytes came in the message: nothing is on its way


class Dma(Ddio):
    name = "dma"

    def __init__(self, net: Any, pid: int, home: str, rbuf: tuple[int, int],
                 tbuf: tuple[int, int]):
        super().__init__(net)
        self.pid, self.home = pid, home
        self.rbuf, self.tbuf = rbuf, tbuf
        self.rpos = self.tpos = 0      # stream offsets in each ring
        self.loads: deque[int] = deque()
        self.loading = False

    def deliver(self, skel: Any, n: int) -> None:
        data = memoryview(skel.rx.get(n))
        at = 0
        try:
            for addr, length in ring_pieces(self.rbuf, self.rpos, n):
                self.net.ep.call(self.home, Op.M_DMA_WRITE,
                                 DMA.pack(self.pid, addr, length) + data[at:at + length])
                at += length
        except OSError as exc:   # the process's memory is gone (it ended), or m is
            skel._fail(exc.errno or errno.EIO)
            return
        self.rpos += n
        if not skel.dead:
            self.net.push(skel, Op.STUB_DATA_DMA, SK_N.pack(skel.stub, n))

    def load(self, skel: Any, n: int) -> None:  # type: ignore[override]
        self.loads.append(n)
        if self.loading:
            return  # a nested N_SEND_DMA: the outer loop below takes it, in order
        self.loading = True
        try:
            while self.loads and not skel.dead and not skel.broken:
                n = self.loads.popleft()
                parts = [self.net.ep.call(self.home, Op.M_DMA_READ, DMA.pack(self.pid, addr, k))
                         for addr, k in ring_pieces(self.tbuf, self.tpos, n)]
                self.tpos += n
                skel.send(memoryview(b"".join(parts)))
        except OSError as exc:   # the process's memory is gone: the stream cannot go on
            self.loads.clear()
            skel._fail(exc.errno or errno.EIO)
        finally:
            self.loading = False
        if not skel.dead:
            skel.flush()   # a SHUT_WR or close that waited for these bytes goes ahead now

    def busy(self) -> bool:
        return self.loading or bool(self.loads)
