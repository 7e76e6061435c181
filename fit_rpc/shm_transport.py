"""FIT over shared memory: message rings in memfd segments, one host (the default).

- An endpoint that serves listens at its rendezvous (rendezvous.py), a Unix
  socket RUN_DIR/ID.fit; its address is `shm://RUN_DIR/ID.fit#PID`, PID being
  the listener's, which a connector checks against SO_PEERCRED.
- A *link* joins two endpoints: the one that sends requests (the connector)
  makes a segment of two rings (native/fitring.c) and hands it over at the
  rendezvous. Ring 0 carries its requests and one-way messages, ring 1 the
  replies. A peer's requests come on links it made; replies to our requests
  on links we made (as ZeroMQ's ROUTER inbox and DEALERs do).
- Each endpoint has one Bell (a bell word only it can write, and an eventfd):
  every ring it consumes rings that one fd, so an endpoint sleeps on one fd,
  and fileno()/arm()/disarm() let an epoll, select or asyncio loop sleep on
  it too. A waiter spins for `poll_us` first (sched_yield between looks):
  while both sides are awake a round trip never sleeps.
- A link's peer is known by the kernel's word: its claim was checked against
  SO_PEERCRED at the rendezvous (identity.py), and Arrival.pid carries the pid.
- Its rendezvous socket stays open: its hang-up ends the link, once every
  message the peer published has been read (a peer that died mid-write never
  published its last message). A caller waiting for a reply sees the hang-up
  at once: PeerUnreachable.
- A handler reads its request in place, in the ring (zero copy); the slot is
  freed when the endpoint says it is done (done()). A reply is copied out.
- A native data plane (the nComponent's, native/skelpath.c) may read the
  inbound rings and write to a peer's ring itself, in this thread, between
  calls into this transport: inbox_rings() says which rings there are (which
  links are vouched for, and the ring back on each, where it may write a
  reply: its connect(), native/skelconnect.h), out_ring(peer) which ring reaches a peer's
  inbox now, and link_closed(peer) is called before the ring of a link to
  peer goes (so nobody writes into a segment that is unmapped). Or it may be
  the inbox's wait itself (serve_natively(): the mComponent's, native/mplane.h):
  told the rings whenever they change (and while a link is not vouched for),
  it answers in C what it can and hands the rest back as the wait would.
- Channels (channel()): shm_channel.py; the rendezvous here hands them their
  segments.
- Regions (new_region, grant_region, map_region): memfds of their owner; a
  grant passes the fd over the link's rendezvous socket, to that peer only.
- The interconnect model (fabric.py; native/fitring.h says how a ring applies
  it): the connector gives both rings of a link the model of the link's class,
  from `fabric` if given, else from the rack whose run directory holds the
  rendezvous (RUN_DIR/spec.json); the acceptor takes it from the segment. A
  message is not taken before it is due, and every wait wakes when it is: the
  C waits themselves, and an outside loop through fileno(), which then is a
  Waker (the bell's eventfd and a timer that arm() sets to the due time).
  Without a model nothing of this runs: no clock is read, fileno() is the
  eventfd.
The thread of the rendezvous only adds links and marks hang-ups (deques); every
other change happens in the thread that uses the endpoint.

This file is the transport's state (ShmTransport.__init__), its channels,
regions and close(); its parts are mixins in files of their own, each over
the same state: the links (`Link`; made, accepted at the rendezvous, hung up,
closed) shm_links.py's, the receive side (readiness, the inbox, replies, the
wait sets) shm_receiving.py's, the send side (send, call, reply)
shm_sending.py's.
"""

import errno
import mmap
import os
import socket
from collections import deque
from typing import Any

from fit_rpc import rendezvous
from fit_rpc.errors import PeerUnreachable
from fit_rpc.fabric import Fabric
from fit_rpc.header import MAGIC, ONEWAY, REPLY, REQUEST, VERSION
from fit_rpc.params import (
    FIT_CALL_COPY_BYTES,
    FIT_CALL_TIMEOUT_S,
    FIT_MAX_PAYLOAD_BYTES,
    FIT_POLL_US,
)
from fit_rpc.shm_channel import SCHEME, ShmChannel
from fit_rpc.shm_links import Link, ShmLinks
from fit_rpc.shm_receiving import ShmReceiving
from fit_rpc.shm_sending import ShmSending
from fit_rpc.transport import Transport
from native.fitring import (
    Bell,
    WaitSet,
    Waker,
    check_sealed,
    header_constants,
    landing,
    sealed_memfd,
)

header_constants(MAGIC, VERSION, REQUEST, REPLY, ONEWAY, FIT_MAX_PAYLOAD_BYTES)   # fitserve.h


class ShmTransport(ShmLinks, ShmReceiving, ShmSending, Transport):
    """FIT over shared memory: its state here; its parts are the mixins'."""

    def __init__(self, local_id: str, bind: str | None, poll_us: int = FIT_POLL_US,
                 fabric: Fabric | None = None):
        self.id = local_id
        self.spin_s = max(0, poll_us) / 1e6
        self.bell = Bell()
        path = bind[len(SCHEME):].split("#", 1)[0] if bind is not None else None
        self.fabric = fabric   # the model of the links it makes (None: the rack's, if any)
        if fabric is None and path is not None:
            self.fabric = Fabric.of_run_dir(os.path.dirname(path))
        self.waker = Waker(self.bell.efd) if self.fabric is not None else None
        self.inbound: list[Link] = []
        self.out: dict[str, Link] = {}
        self.channels: dict[int, ShmChannel] = {}   # token -> an end waiting for its peer
        self._new: deque[Link] = deque()            # from the rendezvous thread
        self._hung: deque[Link] = deque()           # likewise
        self._held: set[Link] = set()               # a handler still reads its message
        self._draining: set[Link] = set()           # hung, messages left: closed once read
        self._gen = 0                               # inbound changed: wait sets rebuilt
        self._inbox = WaitSet(self.bell.word, self.bell.efd)
        self._back_view, self._back = landing(FIT_CALL_COPY_BYTES)   # call(): the reply,
        #                                                              read here, copied out
        self._inbox_links: list[Link] = []
        self._inbox_gen = -1
        self._nested: tuple[WaitSet, list[Link]] | None = None   # the inbox, held ones left
        self._nested_key: Any = None                             # out, and for which
        self.count = _no_count                      # error counters (the endpoint's)
        self.peer_gone = _no_peer                   # a peer's last link closed
        self.link_closed = _no_peer                 # an outbound link's ring is about to go
        self.add_counts = _no_counts                # a closing link's last counts (shm_links.py)
        self._native: Any = None                    # serve_natively's data plane, and
        self._plane: Any = None                     # whether it reads the inbox now
        self._unvouched = False                     # (shm_receiving.py)
        self.listener: rendezvous.Listener | None = None
        self.address: str | None = None
        if path is not None:
            self.listener = rendezvous.Listener(path, self._on_hello, self._on_hangup,
                                                lambda name: self.count(name))
            self.listener.start()
            self.address = f"{SCHEME}{path}#{os.getpid()}"

    # ---- channels and regions -------------------------------------------------------------------
    def channel(self, peer: str, linger_s: float, sender: Any = None) -> ShmChannel:
        if self.address is None:
            raise OSError(errno.EINVAL, "channels need an endpoint with an inbox")
        return ShmChannel(self, peer)

    def new_region(self, name: str, size: int) -> tuple[mmap.mmap, int]:
        fd = sealed_memfd(f"fit-region {name}", size)
        try:
            return mmap.mmap(fd, size), fd
        except OSError:
            os.close(fd)
            raise

    def grant_region(self, route: Any, handle: int) -> dict[str, Any]:
        socket.send_fds(route.sock, [b"R"], [handle])   # before the reply: it is there first
        return {}

    def map_region(self, peer: str, answer: dict[str, Any], size: int) -> mmap.mmap:
        link = self.out.get(peer)
        if link is None:
            raise PeerUnreachable(f"no link to {peer}")
        link.sock.settimeout(FIT_CALL_TIMEOUT_S)
        try:
            _, fds, _, _ = socket.recv_fds(link.sock, 16, 1)
        finally:
            link.sock.settimeout(None)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError(errno.EPROTO, f"{peer} sent no region")
        try:
            if check_sealed(fds[0]) < size:
                raise OSError(errno.EPROTO, f"{peer}'s region is smaller than it said")
            return mmap.mmap(fds[0], size)
        finally:
            os.close(fds[0])

    def close(self) -> None:
        if self.bell.word is None:
            return   # closed already
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self._sync()
        for peer in self.out:
            self.link_closed(peer)
        for link in [*self.inbound, *self.out.values()]:
            link.close()
        self.inbound.clear()
        self.out.clear()
        for end in list(self.channels.values()):
            end.close()
        if self.waker is not None:
            self.waker.close()
        self.bell.close()


def _no_count(name: str) -> None:
    pass


def _no_peer(peer: str) -> None:
    pass


def _no_counts(rows: list) -> None:
    pass
