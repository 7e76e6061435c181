"""The nComponent's two data paths between its DRAM and a process (the paper, Fig. 5).

One path object per connection (`Ddio` or `Dma`), made when the skeleton
learns its stub's buffers: two rings in the process's virtual memory,
`rbuf`/`tbuf` (address, length) at mComponent `home`. Stub and skeleton walk
them in the same order, so a message carries only a length.

dDDIO (`Ddio`): bytes move between nComponent DRAM and the process's extCache
directly, with no mComponent traffic.
- receive: the skeleton pushes the bytes to the stub (STUB_DATA), which
  places them in the extCache lines of its receive ring;
- send: the stub wrote the bytes into the extCache lines of its send ring and
  says how many (N_SEND); the skeleton reads them from those lines itself --
  what DDIO is in hardware, a NIC reading the processor's cache; here the
  nMonitor maps the pComponent's extCache segment (`ExtCaches`), as an RDMA
  NIC would read a registered region. A line that is no longer cached was
  written back when it was evicted, so the skeleton loads that line from the
  home mComponent instead (M_DMA_READ). The lines it reads are the stub's own
  (its pid's tags): the stub writes no byte of the ring before the skeleton
  confirms it (STUB_SENT).

dDMA (`Dma`): bytes move between nComponent DRAM and the mComponent.
- receive: written into the mComponent at the receive ring's address
  (M_DMA_WRITE); then the stub hears the size (STUB_DATA_DMA) and reads the
  bytes through its extCache, which misses to the mComponent;
- send: the stub flushed its lines to the mComponent first; the skeleton loads
  them from there (M_DMA_READ) on N_SEND_DMA.

Every push names the stub by the id its process gave it (`skel.stub`).
Sending is pulled: N_SEND / N_SEND_DMA only add to `pending`, and the
skeleton pulls pending bytes into tx as far as tx has room (`pull`, from
Skeleton.flush), so the stub's send ring can be larger than the nComponent's
ring and a slow peer leaves the bytes in the process's memory. When the ring
goes away (N_CLOSE, or the process ended: N_RELEASE comes before its pMonitor
drops its lines and its mComponent its pages) the skeleton pulls all of it,
parking what tx cannot take. A call to the mComponent is waited for without
serving the nMonitor's inbox (an mComponent never calls back), so nothing
else happens to the skeleton meanwhile. A dDMA that fails (the process's
memory is gone) breaks the connection, not the nMonitor.
"""

import errno
import os
from typing import Any

from fit_rpc import Op
from fit_rpc.header import HEADER_SIZE
from fit_rpc.netpath import DMA, SK, SK_ERR, SK_N, ring_pieces
from native.extcache import ExtCache
from splitrack.params import NCOMPONENT_RING_BYTES
from splitrack.rundir import RunDir

_WRITE_AT = HEADER_SIZE + DMA.size   # where an M_DMA_WRITE's bytes start


class Ddio:
    name = "ddio"
    send_op = Op.N_SEND

    def __init__(self, net: Any, pid: int, home: str, rbuf: tuple[int, int],
                 tbuf: tuple[int, int], extcache: ExtCache | None = None):
        self.net = net
        self.pid, self.home = pid, home
        self.rbuf, self.tbuf = rbuf, tbuf
        self.rpos = self.tpos = 0      # stream offsets in each ring
        self.pending = 0               # bytes in the stub's send ring, not pulled yet
        self.parked = bytearray()      # bytes pulled out of the ring that tx had no room for
        self.xc = extcache

    # ---- receive --------------------------------------------------------------------
    def deliver(self, skel: Any, n: int) -> None:
        self.net.push(skel, Op.STUB_DATA, SK.pack(skel.stub) + skel.rx.get(n))

    # ---- send -----------------------------------------------------------------------
    def load(self, skel: Any, n: int) -> None:
        """N_SEND / N_SEND_DMA: the stub put n more bytes into its send ring."""
        self.pending += n
        if self.pending > self.tbuf[1]:   # more than its ring holds: a broken stub
            skel._fail(errno.ENOBUFS)
            return
        skel.flush()

    def pull(self, skel: Any, everything: bool = False) -> int:
        """Move the stub's sent bytes out of its send ring into tx, as far as tx has
        room; everything: all of them, parking what tx cannot take yet (the stub
        closes, or its process ended: the ring goes away). Returns how many bytes
        left the ring."""
        if self.parked:
            del self.parked[:skel.tx.put(self.parked)]
        k = self.pending if everything else 0 if self.parked else min(self.pending,
                                                                        skel.tx.space)
        if not k:
            return 0
        data = bytearray(k)
        try:
            at = 0
            for addr, m in ring_pieces(self.tbuf, self.tpos, k):
                self._fetch(addr, memoryview(data)[at:at + m])
                at += m
        except OSError as exc:   # the process's memory is gone: the stream cannot go on
            self.pending = 0
            skel._fail(exc.errno or errno.EIO)
            return 0
        self.tpos += k
        self.pending -= k
        put = skel.tx.put(data)
        if put < k:
            self.parked += memoryview(data)[put:]
        return k

    def _fetch(self, addr: int, out: memoryview) -> None:
        """out <- the process's bytes at addr: from its extCache lines, each line that
        is not cached (evicted, so written back) from the home mComponent."""
        line, done = self.xc.line_size, 0
        while done < len(out):
            got = self.xc.read_into(-1, self.pid, addr + done, out[done:])
            self.net.counts["ddio_extcache_bytes"] += got
            done += got
            if done < len(out):
                k = min(len(out) - done, line - (addr + done) % line)
                out[done:done + k] = self._dma_read(addr + done, k)
                self.net.counts["ddio_mcomponent_bytes"] += k
                done += k

    def _dma_read(self, addr: int, k: int) -> memoryview:
        return self.net.ep.call(self.home, Op.M_DMA_READ, DMA.pack(self.pid, addr, k),
                                serve=False)

    def confirm(self, skel: Any, n: int) -> None:
        self.net.push(skel, Op.STUB_SENT, SK_N.pack(skel.stub, n))

    def closed(self, skel: Any, err: int) -> None:
        self.net.push(skel, Op.STUB_CLOSED, SK_ERR.pack(skel.stub, err))

    def busy(self) -> bool:
        """Bytes the stub sent that are not in tx yet."""
        return bool(self.pending or self.parked)


class Dma(Ddio):
    name = "dma"
    send_op = Op.N_SEND_DMA

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._write_msg = memoryview(bytearray(_WRITE_AT + NCOMPONENT_RING_BYTES))

    def deliver(self, skel: Any, n: int) -> None:
        """Each piece goes from rx straight into an M_DMA_WRITE built in a buffer this
        path reuses (FIT header room first: Endpoint.call(..., room=True))."""
        try:
            for addr, length in ring_pieces(self.rbuf, self.rpos, n):
                msg = self._write_msg[:_WRITE_AT + length]
                DMA.pack_into(msg, HEADER_SIZE, self.pid, addr, length)
                skel.rx.get_into(msg[_WRITE_AT:])
                self.net.ep.call(self.home, Op.M_DMA_WRITE, msg, serve=False, room=True)
        except OSError as exc:   # the process's memory is gone (it ended), or m is; the
            skel._fail(exc.errno or errno.EIO)   # skeleton reads no more, so never delivers
            return
        self.rpos += n
        self.net.push(skel, Op.STUB_DATA_DMA, SK_N.pack(skel.stub, n))

    def _fetch(self, addr: int, out: memoryview) -> None:
        out[:] = self._dma_read(addr, len(out))


class ExtCaches:
    """The pComponents' extCache segments, mapped by the nMonitor for dDDIO (one
    host: a segment is a file under /dev/shm, named by the run directory)."""

    def __init__(self, run_dir: str):
        self.run = RunDir.at(run_dir)
        self._open: dict[str, ExtCache] = {}

    def of(self, pcomponent: str) -> ExtCache:
        xc = self._open.get(pcomponent)
        if xc is None:
            path = self.run.extcache_path(pcomponent)
            if not os.path.exists(path):
                raise OSError(errno.EHOSTUNREACH, f"no extCache of {pcomponent} on this host")
            xc = self._open[pcomponent] = ExtCache.open(path)
        return xc
