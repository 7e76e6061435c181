"""The nComponent's two data paths between its DRAM and a process (the paper, Fig. 5).

One path object per connection (`Ddio` or `Dma`), made when the skeleton
learns its stub's buffers: two rings in the process's virtual memory,
`rbuf`/`tbuf` (address, length) at mComponent `home`. Stub and skeleton walk
them in the same order, so a message carries only a length.

Both paths move bytes as an RDMA NIC would: one-sided copies into and out of
memory another component registered as a FIT region (fit_rpc/regions.py),
never inside a message.

dDDIO (`Ddio`): between nComponent DRAM and the process's extCache lines (the
pComponent's region "extcache"), under each set's lock -- what Intel DDIO does
with a CPU's cache. No mComponent traffic:
- receive: the skeleton writes the bytes from rx straight into the extCache
  lines of the receive ring, then tells the stub how many (STUB_DATA). A line
  that is not cached is installed first, its dirty victim written back to its
  home (write-allocate); its old bytes are not fetched, since the stub reads
  only bytes that arrived. Three copies in all: kernel -> rx, rx -> line,
  line -> the program's buffer.
- send: the stub wrote the bytes into its send ring's lines and says how many
  (N_SEND); the skeleton copies them from those lines straight into tx. A line
  evicted meanwhile was written back, so it comes from the home mComponent
  instead (a dDMA read). Three copies: buffer -> line, line -> tx, tx -> kernel.

The hit path of both copies is one native call per event (native/ddio.c:
every byte of the event, wrapping in both rings, under each set's lock); it
stops at a line that is not cached, and the code here brings that line in
and goes on.

dDMA (`Dma`): between nComponent DRAM and the mComponent's arena (its region
"arena"). Each of the stub's two rings is mapped once, the first time it is
needed, as an RDMA NIC registers memory (`RingMap`: one M_DMA_MAP of the whole
ring, its frames taken and pinned for as long as the socket lives; the
mComponent keeps its page table); from then on every copy is the skeleton's
own, no message. M_DMA_DONE unpins at the end. A mapped ring is handed to
the data plane too (native/dma.h: `conn.rdma`, `conn.tdma`), which copies
it in C as it copies dDDIO's lines; until a ring is mapped, the plane hands
the event that needs it back to the code here, which maps it.
- receive: rx -> the arena at the receive ring's address; then STUB_DATA_DMA,
  and the stub drops its stale lines and reads through its extCache, which
  misses to the mComponent;
- send: the stub flushed its lines to the mComponent first (N_SEND_DMA); the
  skeleton copies them from the arena into tx.

Every push names the stub by the id its process gave it (`skel.stub`).
Sending is pulled (a deviation for DDIO, whose sends the paper's stub pushes:
docs/network.md): N_SEND / N_SEND_DMA only add to `pending`, and the
skeleton pulls pending bytes into tx as far as tx has room (`pull`, from
Skeleton.flush), so the stub's send ring can be larger than the nComponent's
ring and a slow peer leaves the bytes in the process's memory. When the ring
goes away (N_CLOSE, or the process ended: N_RELEASE comes before its pMonitor
drops its lines and its mComponent its pages) the skeleton pulls all of it,
parking what tx cannot take. A call to an mComponent is waited for without
serving the nMonitor's inbox (an mComponent never calls back), so nothing
else happens to the skeleton meanwhile. A copy that fails (the process's
memory is gone) breaks the connection, not the nMonitor.

Traced (`splitrack trace`): each delivery and each pull is recorded as one
one-sided access (DDIO_WRITE, DMA_WRITE, DDIO_READ, DMA_READ: nN -> the
component whose memory it is; a DDIO pull's evicted lines are a DMA_READ of
their own), in the context it runs in (fit_rpc/tracing.py).
"""

import errno
from collections.abc import Callable
from typing import Any

from fit_rpc import Op, tracing
from fit_rpc.netpath import SK_ERR, SK_N, ring_pieces
from fit_rpc.pages import MISS, pack_writeback
from monitors.rack_memory import RackMemory, RingMap
from native.ddio import DdioRing
from native.nring import ffi


class Ddio:
    name = "ddio"
    send_op = Op.N_SEND
    data_op = Op.STUB_DATA

    def __init__(self, net: Any, conn: Any, pid: int, pcomponent: str, home: str,
                 rbuf: tuple[int, int], tbuf: tuple[int, int]):
        self.net = net
        self.c = conn                  # the data plane's state: rpos, tpos, pending live there
        self.pid, self.home = pid, home
        self.rbuf, self.tbuf = rbuf, tbuf
        self.first_lap = True          # this delivery lands where rx was never written
        self.parked = bytearray()      # bytes pulled out of the ring that tx had no room for
        self.memory: RackMemory = net.memory
        self.home_index = self.memory.m_ids.index(home)
        self.xc = self.memory.extcache(pcomponent) if self.name == "ddio" else None
        self.lines = None if self.xc is None else (   # dDDIO's hit path, in C
            DdioRing(self.xc, pid, *rbuf), DdioRing(self.xc, pid, *tbuf))
        if self.lines is not None:     # ... and the data plane's (native/skelpath.c)
            conn.rbuf, conn.tbuf = self.lines[0].ring, self.lines[1].ring
        else:                          # (dDMA: the plane's sizes; the rings once mapped)
            conn.dma = 1
            conn.rbuf = {"xc": ffi.NULL, "pid": pid, "start": rbuf[0], "size": rbuf[1]}
            conn.tbuf = {"xc": ffi.NULL, "pid": pid, "start": tbuf[0], "size": tbuf[1]}
        self._maps: dict[tuple[int, int], RingMap] = {}   # a ring -> its mapping at home

    # stream offsets in each ring, and the bytes in the stub's send ring not pulled yet
    rpos = property(lambda self: self.c.rpos, lambda self, v: setattr(self.c, "rpos", v))
    tpos = property(lambda self: self.c.tpos, lambda self, v: setattr(self.c, "tpos", v))
    pending = property(lambda self: self.c.pending,
                       lambda self, v: setattr(self.c, "pending", v))

    # ---- receive --------------------------------------------------------------------
    def deliver(self, skel: Any, n: int, stored: int = 0) -> None:
        """n bytes arrived in rx: into the process's receive ring, then the stub hears.
        `stored`: the first of them are there already (the data plane put them there and
        moved rpos past them: native/skelpath.c); the rest wait in rx."""
        rpos = self.rpos - stored
        self.first_lap = rpos + n <= self.rbuf[1]
        try:
            done = stored
            if self.lines and done < n:
                done += self.lines[0].store(skel.rx, rpos + done, n - done)
                self.net.counts["ddio_extcache_bytes"] += done - stored
            if done < n:   # a line that is not cached, or dDMA
                rest = n - done
                _walk(ring_pieces(self.rbuf, rpos + done, rest), skel.rx.used_views(rest),
                      self._store)
                skel.rx.drop(rest)
        except OSError as exc:   # the process's memory is gone (it ended), or m is; the
            skel._fail(exc.errno or errno.EIO)   # skeleton reads no more, so never delivers
            return
        self.rpos = rpos + n
        if skel.trace is not None:
            self._traced(skel, "WRITE", n, 0)
        self.net.push(skel, self.data_op, SK_N.pack(skel.stub, n))

    def _store(self, addr: int, data: memoryview) -> None:
        """dDDIO: data into the process's extCache lines at addr (write-allocate)."""
        xc, pid, end = self.xc, self.pid, addr + len(data)
        done = xc.write_from(-1, pid, addr, data)
        while done < len(data):
            self._allocate((addr + done) // xc.line_size, addr + done, end)
            done += xc.write_from(-1, pid, addr + done, data[done:])
        self.net.counts["ddio_extcache_bytes"] += len(data)

    def _allocate(self, vpage: int, lo: int, hi: int) -> None:
        """Install the receive ring's line vpage for the bytes [lo, hi) about to land
        in it. Zeros when nothing else in it can be unread: the write starts at
        the line's start and fills it, or ends where the ring was never written
        (its first lap). Else the line comes from home, as the process's own miss
        would fetch it: bytes it has not read yet may share the line."""
        xc, line = self.xc, self.xc.line_size
        victim = xc.miss_begin(-1, self.pid, vpage)
        if victim is None:
            return   # cached after all
        vpid, vhome, vvpage = victim
        start = vpage * line
        fresh = lo == start and (hi >= start + line or self.first_lap)
        try:
            data = None
            if not fresh and vpid and vhome == self.home_index:   # LegoOS piggyback
                data = self.net.ep.call(self.home, Op.M_MISS, MISS.pack(
                    self.pid, vpage, vpid, vvpage) + xc.victim_buf, serve=False)
            else:
                if vpid:
                    self.net.ep.call(self.memory.m_ids[vhome], Op.M_WRITEBACK,
                                     pack_writeback(vpid, [vvpage], [xc.victim_buf]),
                                     serve=False)
                if not fresh:
                    data = self.net.ep.call(self.home, Op.M_MISS,
                                            MISS.pack(self.pid, vpage, 0, 0), serve=False)
            xc.miss_end(-1, self.pid, vpage, self.home_index, data)
        except BaseException:
            xc.miss_abort(self.pid, vpage)
            raise

    # ---- send -----------------------------------------------------------------------
    def load(self, skel: Any, n: int) -> None:
        """N_SEND / N_SEND_DMA: the stub put n more bytes into its send ring."""
        self.pending += n
        if self.pending > self.tbuf[1]:   # more than its ring holds: a broken stub
            skel._fail(errno.ENOBUFS)
            return
        skel.flush()

    def pull(self, skel: Any, everything: bool = False) -> int:
        """Copy the stub's sent bytes out of its send ring into tx, as far as tx has
        room; everything: all of them, parking what tx cannot take yet (the stub
        closes, or its process ended: the ring goes away). Returns how many bytes
        left the ring."""
        if self.parked:
            del self.parked[:skel.tx.put(self.parked)]
        k = 0 if self.parked else min(self.pending, skel.tx.space)
        rest = self.pending - k if everything else 0
        evicted = self.net.counts["ddio_mcomponent_bytes"] if skel.trace is not None else 0
        try:
            done = self.lines[1].fetch(skel.tx, self.tpos, k) if k and self.lines else 0
            self.net.counts["ddio_extcache_bytes"] += done
            if done < k:   # a line that is not cached (evicted: at home), or dDMA
                _walk(ring_pieces(self.tbuf, self.tpos + done, k - done),
                      skel.tx.free_views(k - done), self._fetch)
                skel.tx.commit(k - done)
            if rest:
                park = bytearray(rest)
                _walk(ring_pieces(self.tbuf, self.tpos + k, rest), [memoryview(park)],
                      self._fetch)
                self.parked += park
        except OSError as exc:   # the process's memory is gone: the stream cannot go on
            self.pending = 0
            skel.tx.reset()   # what this pull put there goes nowhere now
            skel._fail(exc.errno or errno.EIO)
            return 0
        self.tpos += k + rest
        self.pending -= k + rest
        if skel.trace is not None and k + rest:
            self._traced(skel, "READ", k + rest,
                         self.net.counts["ddio_mcomponent_bytes"] - evicted)
        return k + rest

    def _traced(self, skel: Any, way: str, n: int, evicted: int) -> None:
        """Record a copy of n bytes to or from the process's memory (`evicted` of them
        from its home: lines no longer cached)."""
        ctx, at = tracing.current.ctx or skel.trace, self.net.id
        ours = self.xc is not None   # dDDIO: the pComponent's extCache lines
        if n - evicted:
            where = skel.owner.partition(".")[0] if ours else self.home
            tracing.event(ctx, at, at, where, f"{self.name.upper()}_{way}", n - evicted,
                          "access")
        if evicted:
            tracing.event(ctx, at, at, self.home, f"DMA_{way}", evicted, "access")

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
                self._dma(self.tbuf, addr + done, out[done:done + k], write=False)
                self.net.counts["ddio_mcomponent_bytes"] += k
                done += k

    def _dma(self, ring: tuple[int, int], addr: int, buf: memoryview, write: bool) -> None:
        """One-sided copy between buf and the process's bytes at addr, in `ring`, at
        its home's arena (the ring is mapped the first time)."""
        ring_map = self._maps.get(ring)
        if ring_map is None:
            ring_map = self._maps[ring] = RingMap(self.net.ep, self.memory.arena(self.home),
                                                  self.home, self.pid, ring)
            if ring == self.rbuf:   # the data plane copies it from now on too
                self.c.rdma = ring_map.native.ring
            if ring == self.tbuf:
                self.c.tdma = ring_map.native.ring
        ring_map.copy(addr, buf, write)

    def close(self) -> None:
        """The socket is gone: its rings' mappings are released (M_DMA_DONE)."""
        self.c.rdma = self.c.tdma = ffi.NULL   # (the plane's first)
        for ring_map in self._maps.values():
            ring_map.release()
        self._maps.clear()

    def home_gone(self, component: str) -> None:
        """A component's process ended: if it was this path's home, its mappings went
        with its arena, unreleased (the next copy maps again, and fails)."""
        if component == self.home:
            self.c.rdma = self.c.tdma = ffi.NULL
            self._maps.clear()

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
    data_op = Op.STUB_DATA_DMA

    def _store(self, addr: int, data: memoryview) -> None:
        self._dma(self.rbuf, addr, data, write=True)

    def _fetch(self, addr: int, out: memoryview) -> None:
        self._dma(self.tbuf, addr, out, write=False)


def _walk(pieces: list[tuple[int, int]], views: list[memoryview],
          fn: Callable[[int, memoryview], None]) -> None:
    """fn(address, view) for each stretch where the ring pieces (address, length) and
    the views (in order, the same number of bytes in all) overlap."""
    vi = voff = 0
    for addr, length in pieces:
        while length:
            view = views[vi]
            k = min(length, len(view) - voff)
            fn(addr, view[voff:voff + k])
            addr += k
            length -= k
            voff += k
            if voff == len(view):
                vi, voff = vi + 1, 0
