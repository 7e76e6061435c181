"""The nComponent's Proxy: it makes the kernel sockets that bsdSocketSkeletons own,
and hands out the nComponent DRAM their rings live in.

Interface (used by nmonitor.py only):
    proxy = Proxy(nics=["127.0.0.11"], loopback="127.0.0.10", dram_bytes=64 << 20)
    proxy.bound(ip, port, opts, with_loopback, kind=SOCK_STREAM) -> [kernel sockets], port
                                   (kind SOCK_DGRAM: UDP sockets, a datagram skeleton's)
    proxy.for_connect(src_ip, opts) -> kernel socket bound to (src_ip, 0)
    proxy.apply(sock, level, opt, value) / proxy.query(sock, level, opt)
    proxy.rings() -> (rx, tx) NRings of NCOMPONENT_RING_BYTES each; ENOBUFS when DRAM is full
    proxy.free(rx, tx); proxy.connections_free   connections the DRAM holds still

Routing: a socket leaves from the NIC it was bound on; an unbound one from the
NIC GNM allocated to its process (the stub names it), or from the rack
loopback alias when it connects to the rack's 127.0.0.1. An address that is
no NIC of this nComponent (nor the loopback alias) is EADDRNOTAVAIL.
Socket options: the ones a stub may set (ALLOWED), the ones it may only read
(READ_ONLY: what the kernel's TCP says of the connection); others are ENOPROTOOPT.
"""

import errno
import mmap
import socket

from native.nring import NRing
from splitrack.params import NCOMPONENT_RING_BYTES

ALLOWED = {
    (socket.SOL_SOCKET, socket.SO_REUSEADDR), (socket.SOL_SOCKET, socket.SO_REUSEPORT),
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE), (socket.SOL_SOCKET, socket.SO_RCVBUF),
    (socket.SOL_SOCKET, socket.SO_SNDBUF), (socket.SOL_SOCKET, socket.SO_ERROR),
    (socket.SOL_SOCKET, socket.SO_BROADCAST), (socket.IPPROTO_TCP, socket.TCP_NODELAY),
}
READ_ONLY = {(socket.IPPROTO_TCP, o) for o in (   # what the kernel's TCP says of the connection
    socket.TCP_INFO, socket.TCP_CONGESTION, socket.TCP_MAXSEG)}
_BIND_ATTEMPTS = 32   # 0.0.0.0 with port 0: a port free on both the NIC and the loopback alias
_IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)   # Linux's number


class Proxy:
    def __init__(self, nics: list[str], loopback: str, dram_bytes: int):
        self.nics = set(nics)
        self.loopback = loopback
        self.arena = mmap.mmap(-1, dram_bytes)          # the nComponent's DRAM
        self._free = [NRing(self.arena, i * NCOMPONENT_RING_BYTES, NCOMPONENT_RING_BYTES)
                      for i in range(dram_bytes // NCOMPONENT_RING_BYTES - 1, -1, -1)]
        self.slots_total = len(self._free)

    # ---- kernel sockets -----------------------------------------------------------------
    def bound(self, ip: str, port: int, opts: list, with_loopback: bool,
              kind: int = socket.SOCK_STREAM) -> tuple[list[socket.socket], int]:
        self._check_local(ip)
        for _ in range(_BIND_ATTEMPTS if with_loopback and port == 0 else 1):
            first = self._bound_one(ip, port, opts, kind)
            if not with_loopback:
                return [first], first.getsockname()[1]
            chosen = first.getsockname()[1]
            try:
                return [first, self._bound_one(self.loopback, chosen, opts, kind)], chosen
            except OSError as exc:
                first.close()
                if exc.errno != errno.EADDRINUSE or port != 0:
                    raise
        raise OSError(errno.EADDRINUSE, "no port free on both the NIC and the rack loopback")

    def for_connect(self, src_ip: str, opts: list) -> socket.socket:
        """A socket bound to its NIC, its port chosen at connect() as the kernel
        chooses an unbound socket's (IP_BIND_ADDRESS_NO_PORT): a port taken at bind
        time must be free of every TIME_WAIT, a slow search once thousands exist."""
        if not src_ip:
            return self._plain(opts)
        self._check_local(src_ip)
        sock = self._plain(opts)
        try:
            sock.setsockopt(socket.IPPROTO_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((src_ip, 0))
        except OSError:
            sock.close()
            raise
        return sock

    def _bound_one(self, ip: str, port: int, opts: list,
                   kind: int = socket.SOCK_STREAM) -> socket.socket:
        self._check_local(ip)
        sock = self._plain(opts, kind)
        try:
            sock.bind((ip, port))
        except OSError:
            sock.close()
            raise
        return sock

    def _plain(self, opts: list, kind: int = socket.SOCK_STREAM) -> socket.socket:
        sock = socket.socket(socket.AF_INET, kind)
        try:
            for level, opt, value in opts:
                self.apply(sock, level, opt, value)
        except OSError:
            sock.close()
            raise
        return sock

    def _check_local(self, ip: str) -> None:
        if ip not in self.nics and ip != self.loopback:
            raise OSError(errno.EADDRNOTAVAIL, f"{ip} is no NIC of this nComponent")

    @staticmethod
    def apply(sock: socket.socket, level: int, opt: int, value: int) -> None:
        if (level, opt) not in ALLOWED or opt == socket.SO_ERROR:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")
        sock.setsockopt(level, opt, value)

    @staticmethod
    def query(sock: socket.socket, level: int, opt: int, buflen: int = 0) -> int | bytes:
        """An option's value: an int, or (buflen > 0) its first buflen bytes."""
        if (level, opt) not in ALLOWED and (level, opt) not in READ_ONLY:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")
        return sock.getsockopt(level, opt, buflen) if buflen else sock.getsockopt(level, opt)

    # ---- nComponent DRAM ------------------------------------------------------------------
    def rings(self) -> tuple[NRing, NRing]:
        if len(self._free) < 2:
            raise OSError(errno.ENOBUFS, f"nComponent DRAM is full: it holds "
                                         f"{self.connections_max} connections (ncomponent.dram)")
        return self._free.pop(), self._free.pop()

    def free(self, *rings: NRing) -> None:
        for ring in rings:
            ring.reset()
            self._free.append(ring)

    @property
    def connections_max(self) -> int:
        """How many connections the DRAM holds (an rx and a tx ring each)."""
        return self.slots_total // 2

    @property
    def connections_free(self) -> int:
        """How many more connections the DRAM holds now."""
        return len(self._free) // 2

    @property
    def slots_used(self) -> int:
        return self.slots_total - len(self._free)

    def close(self) -> None:
        self._free.clear()   # the rings hold exports of the arena
        try:
            self.arena.close()
        except BufferError:  # a skeleton still holds a ring: the process exits anyway
            pass
