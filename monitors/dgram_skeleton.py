"""A datagram bsdSocketSkeleton: the nComponent's half of a UDP socket.

It is a Skeleton (skeleton.py) over kernel UDP sockets: one on its NIC, and one
on the rack loopback beside it when the stub bound 0.0.0.0. Its rings, its
data paths (dDDIO, dDMA: data_paths.py) and its flow control are a stream
skeleton's; what crosses them are records, each a DGRAM header
(fit_rpc/netpath.py: length, IPv4 address, port) and then the datagram's
bytes, so a datagram's boundaries are kept end to end:

- receive: each datagram a kernel socket gives (recvfrom) becomes one record
  in rx, its sender's address in the header, and is delivered whole to the
  stub's receive ring (STUB_DATA or STUB_DATA_DMA: the record's length),
  counted in the nMonitor's `datagrams_in` (sent ones in `datagrams_out`).
  One that the stub's window has no room for is not read: it waits in the
  kernel socket, whose receive buffer (SO_RCVBUF) holds what waits behind it
  and drops what overflows, as Linux's does for a program that reads slowly;
- send: the stub writes one record a datagram into its send ring, its
  destination in the header (0.0.0.0:0: the connected peer); the skeleton
  pulls them into tx as a stream skeleton pulls bytes, and gives the kernel
  each complete one (sendto, or send on a connected socket). A record whose
  destination is the rack loopback leaves from the loopback socket.

An error a kernel socket reports (a send's: EACCES, EMSGSIZE, ENETUNREACH; on
a connected socket an ICMP's: ECONNREFUSED) drops that datagram and goes to
the stub (STUB_DGRAM_ERROR), whose next call reports it once, as Linux does;
the socket stays usable. N_DGRAM_CONNECT gives the socket a default peer: the
kernel socket that reaches it connects, and the other one closes (only the
peer's datagrams arrive from then on). It never runs in the data plane
(plain() is False): every datagram is this file's.
"""

import errno
import socket
import time
from typing import Any

from fit_rpc import Op, tracing
from fit_rpc.netpath import DGRAM, MAX_DATAGRAM, SK_ERR
from monitors.skeleton import Net, Skeleton
from splitrack.params import SOCKET_SENT_BYTES

_ANY = bytes(4)
_BATCH = 64   # datagrams read from one socket per readiness event (the loop goes on)
_PEEK_SIZE = socket.MSG_PEEK | socket.MSG_TRUNC   # recv: the next datagram's size, kept
_SCRATCH = bytearray(MAX_DATAGRAM + 1)   # one nMonitor thread: one landing for all


class DgramSkeleton(Skeleton):
    def __init__(self, net: Net, sk: int, owner: str, socks: list[socket.socket], conn: Any):
        super().__init__(net, sk, owner, socks, conn)
        self.blocked = False   # the kernel took no more: a complete record waits in tx
        self.stalled = False   # the next datagram does not fit the stub's window: it
        #                        waits in the kernel (whose SO_RCVBUF bounds the queue)
        self.counts = net.counts   # the nMonitor's: datagrams_in, _out (STATS)

    def plain(self) -> bool:
        return False

    def watched(self) -> list[socket.socket]:
        return self.socks

    def wants_read(self) -> bool:
        return self.rx is not None and not (self.eof or self.stalled) and \
            self.closing_since is None

    def wants_write(self) -> bool:
        return self.blocked

    # ---- receive ------------------------------------------------------------------
    def readable(self, fd: int) -> None:
        sock = next((s for s in self.socks if s.fileno() == fd), None)
        if sock is None or not self.wants_read():
            return
        for _ in range(_BATCH):
            room = min(self.window, self.rx.space) - DGRAM.size
            try:
                if room < MAX_DATAGRAM and sock.recv_into(_SCRATCH, 1, _PEEK_SIZE) > room:
                    self.stalled = True   # it waits in the kernel until the stub reads
                    self.net.watch(self)
                    return
                n, (ip, port) = sock.recvfrom_into(_SCRATCH)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:   # an ICMP error on a connected socket
                self.error(exc.errno or errno.EIO)
                continue
            record = DGRAM.size + n
            self.counts["datagrams_in"] += 1
            self.rx.put(DGRAM.pack(n, socket.inet_aton(ip), port))
            self.rx.put(memoryview(_SCRATCH)[:n])
            self.received(record)
            if self.dead or self.broken:
                return

    def credit(self, n: int) -> None:
        self.window += n
        if self.stalled:   # the datagram that did not fit may now
            self.stalled = False
            self.net.watch(self)

    # ---- send -----------------------------------------------------------------------
    def writable(self) -> None:
        self.flush()

    def flush(self) -> None:
        """Pull the stub's records into tx and give the kernel each complete one."""
        tx = self.tx
        if tx is None:
            return
        was, self.blocked = self.blocked, False
        while True:
            self.unconfirmed += self.path.pull(self)
            if self.dead or self.broken:
                return
            sent = 0
            while tx.used >= DGRAM.size:
                n, ip, port = DGRAM.unpack(tx.peek(DGRAM.size))
                if n > MAX_DATAGRAM:   # not a record: a broken stub
                    tx.reset()
                    self._fail(errno.EPROTO)
                    return
                if tx.used < DGRAM.size + n:
                    break   # its last bytes are still in the stub's ring
                if not self._give(tx.peek(DGRAM.size + n)[DGRAM.size:], ip, port):
                    break
                tx.drop(DGRAM.size + n)
                sent += 1
            if self.blocked or not sent or not self.path.busy():
                break
        if self.unconfirmed >= SOCKET_SENT_BYTES:   # the stub blocks only at a full ring
            self.path.confirm(self, self.unconfirmed)
            self.unconfirmed = 0
        if self.closing_since is not None and not self.blocked:
            self.net.closed(self)   # all it sent is out: the close goes on
        elif self.blocked != was:
            self.net.watch(self)

    def _give(self, data: bytes, ip: bytes, port: int) -> bool:
        """One datagram to the kernel: True once it is taken, or dropped for an error
        the stub hears of; False if the kernel takes no more now (then `blocked`)."""
        try:
            if ip == _ANY and port == 0:
                self.sock.send(data)
            else:
                addr = socket.inet_ntoa(ip)
                self._sock_for(addr).sendto(data, (addr, port))
        except (BlockingIOError, InterruptedError):
            self.blocked = True
            return False
        except OSError as exc:
            self.error(exc.errno or errno.EIO)
            return True
        self.bytes_out += len(data)
        self.counts["datagrams_out"] += 1
        if self.trace is not None:
            tracing.event(self.trace, self.net.id, self.net.id, "net", "KERNEL_SEND",
                          len(data), "kernel")
        return True

    def _sock_for(self, ip: str) -> socket.socket:
        """The loopback socket for the rack loopback (if it has one), else the NIC's."""
        if len(self.socks) > 1 and ip == self.socks[1].getsockname()[0]:
            return self.socks[1]
        return self.socks[0]

    # ---- the stub's requests ----------------------------------------------------------
    def connect_to(self, ip: str, port: int) -> tuple[str, int]:
        """N_DGRAM_CONNECT: the default peer; the socket that reaches it connects, the
        other one (if any) closes. Returns the local address."""
        sock = self._sock_for(ip)
        sock.connect((ip, port))
        for other in [s for s in self.socks if s is not sock]:
            self.net.drop_socket(self, other)
        return sock.getsockname()

    def close(self) -> None:
        """N_CLOSE (or N_RELEASE): what the stub sent leaves first (if the kernel takes
        no more now, as it takes more: SKELETON_LINGER_S at most); then the sockets
        close."""
        self.closing_since = time.monotonic()
        if self.path is None or self.broken:
            self.net.closed(self)
            return
        self.unconfirmed += self.path.pull(self, everything=True)   # (its ring goes away)
        self.flush()   # closes it once all is out (or at once if nothing waits)

    def error(self, code: int) -> None:
        """A datagram's error: the stub's next call says it, once."""
        self.net.push(self, Op.STUB_DGRAM_ERROR, SK_ERR.pack(self.stub, code))
