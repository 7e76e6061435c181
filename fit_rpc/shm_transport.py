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
  peer goes (so nobody writes into a segment that is unmapped).
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
"""

import errno
import mmap
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from fit_rpc import rendezvous
from fit_rpc.errors import PeerMoved, PeerUnreachable
from fit_rpc.fabric import Fabric, Model
from fit_rpc.header import HEADER_SIZE, MAGIC, ONEWAY, REPLY, REQUEST, VERSION, pack
from fit_rpc.identity import check_claim, expected_pid
from fit_rpc.shm_channel import SCHEME, ShmChannel
from fit_rpc.transport import STEP_READ, Arrival, Frame, Transport
from native.fitring import (
    NEVER,
    SENT,
    WOKEN,
    Bell,
    Ring,
    RingBroken,
    Segment,
    WaitSet,
    Waker,
    check_sealed,
    header_constants,
    landing,
    sealed_memfd,
)
from splitrack.params import (
    FIT_CALL_COPY_BYTES,
    FIT_CALL_TIMEOUT_S,
    FIT_MAX_PAYLOAD_BYTES,
    FIT_POLL_US,
    FIT_REPLY_WAIT_S,
    FIT_RING_BYTES,
)

header_constants(MAGIC, VERSION, REQUEST, REPLY, ONEWAY, FIT_MAX_PAYLOAD_BYTES)   # fitserve.h


class Link:
    """One connection between two endpoints: its segment, rings and rendezvous socket."""

    __slots__ = ("peer", "pid", "sock", "seg", "tx", "rx", "peer_efd", "peer_bell", "outbound",
                 "hung", "closed", "busy", "verdict", "_serve_set", "_serve_gen", "_alone",
                 "_held_set", "_held_key")

    def __init__(self, peer: str, pid: int, sock: socket.socket, seg: Segment, peer_efd: int,
                 peer_bell: Any, outbound: bool):
        self.peer, self.pid, self.sock, self.seg = peer, pid, sock, seg
        self.peer_efd, self.peer_bell, self.outbound = peer_efd, peer_bell, outbound
        mine, theirs = (0, 1) if outbound else (1, 0)   # ring 0: the connector's messages
        self.tx = seg.ring(mine, peer_bell.ptr, peer_efd, peer_bell)
        self.rx = seg.ring(theirs, None, peer_efd)
        self.hung = self.closed = False
        self.busy = 0                       # callers waiting for its replies
        self.verdict: bool | None = None    # the endpoint's vouch, made on the first message
        self._serve_set: WaitSet | None = None
        self._serve_gen = -1
        self._alone: WaitSet | None = None
        self._held_set: WaitSet | None = None   # _serve_set while handlers hold messages,
        self._held_key: Any = None              # and for which links (and _gen) it was made

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.sock.close()
        os.close(self.peer_efd)
        self.seg.close()
        self.peer_bell.close()


class ShmTransport(Transport):
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
        self.listener: rendezvous.Listener | None = None
        self.address: str | None = None
        if path is not None:
            self.listener = rendezvous.Listener(path, self._on_hello, self._on_hangup,
                                                lambda name: self.count(name))
            self.listener.start()
            self.address = f"{SCHEME}{path}#{os.getpid()}"

    # ---- readiness (an outside loop sleeps on fileno()) -------------------------------------
    def fileno(self) -> int:
        return self.bell.efd if self.waker is None else self.waker.fileno()

    def arm(self) -> bool:
        self._sync()
        return self._inbox_set()[0].arm_with(self.waker)

    def disarm(self) -> None:
        if self.waker is not None:
            self.waker.at(0)
        if not self._inbox.disarm():
            return
        self._sync()

    def pending(self) -> bool:
        self._sync()
        return self._inbox_set()[0].ready() >= 0

    # ---- sending ------------------------------------------------------------------------------
    def send(self, peer: str, address: str, frame: Frame, timeout_s: float,
             head: bytes = b"") -> None:
        link = self.out.get(peer)
        if link is None or link.hung:
            link = self._connect(peer, address, timeout_s)
        try:
            if link.tx.send(head, frame):
                return
            if link.tx.wait_space(len(head) + len(frame), self.bell.efd, self.spin_s, timeout_s) \
                    and link.tx.send(head, frame):
                return
        except RingBroken:
            self._lost(link, "ring_broken")
            raise PeerUnreachable(f"{peer} broke its ring") from None
        raise PeerUnreachable(f"{peer} takes no more: its ring stayed full for {timeout_s:g} s")

    def call(self, peer: str, op: int, seq: int, frame: Frame, timeout_s: float, serve: bool,
             meanwhile: Callable[[], None] | None = None) -> memoryview | bytes | bool:
        link = self.out.get(peer)
        if link is None or link.hung:
            return False
        ws = self._reply_set(link, serve)
        link.busy += 1   # (as recv_reply: not closed under us)
        try:
            tx = link.tx
            if meanwhile is not None:   # the request out, the caller's work, then the wait
                if not tx.send(pack(REQUEST, op, seq, len(frame)), frame):
                    return False
                meanwhile()
                tx = None
            got = ws.call(tx, op, seq, frame, timeout_s)
        except RingBroken:
            self.count("ring_broken")
            link.hung = True
            raise PeerUnreachable(f"{peer} broke its ring") from None
        finally:
            link.busy -= 1
            if link.hung and not link.busy:
                self._lost(link)
        if got >= 0:
            if ws.plain:
                return memoryview(self._back_view[HEADER_SIZE:got].tobytes())
            return bytes(self._back_view[:got])
        return got == SENT

    def call_native(self, peer: str, seq: int, step: Callable[[Any, Any, int, int], int],
                    timeout_s: float, serve: bool) -> int | bytes | None:
        link = self.out.get(peer)
        if link is None or link.hung:
            return None
        ws = self._reply_set(link, serve)
        link.busy += 1   # (as call())
        try:
            got = step(ws.caller(), link.tx.r, seq, max(0, int(timeout_s * 1e9)))
            if got == -errno.EBADMSG:   # (as call() on RingBroken)
                self.count("ring_broken")
                link.hung = True
                raise PeerUnreachable(f"{peer} broke its ring")
            if got < 0:
                raise OSError(-got, f"FIT call to {peer}: {os.strerror(-got)}")
        finally:
            link.busy -= 1
            if link.hung and not link.busy:
                self._lost(link)
        if got == STEP_READ:
            return bytes(self._back_view[:ws.length()])
        return got

    def reply(self, route: Any, frame: Frame, head: bytes = b"") -> None:
        link: Link = route
        if link.closed:
            self.count("reply_dropped")
            return
        try:
            if link.tx.send(head, frame) or (
                    link.tx.wait_space(len(head) + len(frame), self.bell.efd, self.spin_s,
                                       FIT_REPLY_WAIT_S)
                    and link.tx.send(head, frame)):
                return
        except RingBroken:
            self._lost(link, "ring_broken")
            return
        self.count("reply_dropped")   # its caller reads no more: it gave up, or is gone

    # ---- receiving ----------------------------------------------------------------------------
    def recv_inbound(self, timeout_s: float | None) -> Arrival | None:
        if self._new or self._hung or self._draining:
            self._sync()
        ws, links = self._inbox_set()
        i = ws.take(self.spin_s, timeout_s)
        if i < 0:
            if timeout_s != 0:
                if i == WOKEN and not (self._new or self._hung) and ws.next_due() == NEVER:
                    self.count("doorbell_empty")
                self._sync()
            return None
        link, msg = links[i], ws.msg
        if msg.at < 0:
            if msg.at != -errno.EAGAIN:
                self._lost(link, "ring_broken")
            return None
        self._held.add(link)
        return _arrival(Arrival, (link.peer, link, [link.rx.view(msg.at, msg.len)], link.pid,
                                  link, (msg.kind, msg.op, msg.seq) if msg.plain else None))

    def answer(self, arrival: Arrival, op: int, seq: int, frame: Frame) -> bool:
        link: Link = arrival.link
        if link.closed or arrival.head is None:
            return False
        try:
            if not link.tx.answer(link.rx, op, seq, frame):
                return False
        except RingBroken:
            return False   # (reply() finds it so and says so)
        self._held.discard(link)   # released: done()'s work is done, but for
        self._close_if_drained(link)   # a hung link's end
        return True

    def done(self, arrival: Arrival) -> None:
        link: Link = arrival.link
        if link in self._held:
            self._held.discard(link)
            if not link.closed:
                link.rx.consume()
        self._close_if_drained(link)

    def _close_if_drained(self, link: Link) -> None:
        """A hung link goes once everything its peer published is read."""
        if link.hung and not link.closed and not link.rx.pending():
            self._close(link)

    def recv_reply(self, peer: str, timeout_s: float, serve: bool) -> Frame | None:
        link = self.out.get(peer)
        if link is None:
            raise PeerUnreachable(f"no link to {peer}")
        link.busy += 1   # not closed under us, whatever _sync() learns meanwhile
        try:
            while True:
                try:
                    view = link.rx.peek()
                except RingBroken:
                    self.count("ring_broken")
                    link.hung = True   # closed on the way out
                    raise PeerUnreachable(f"{peer} broke its ring") from None
                if view is not None:
                    data = bytes(view)
                    link.rx.consume()
                    return data
                if link.hung and not link.rx.pending():   # all it published is read: gone
                    raise PeerUnreachable(f"{peer} is gone (its process ended)")
                ws = self._reply_set(link, serve)   # (hung: a reply not yet due waits)
                i = ws.wait(self.spin_s, timeout_s, [] if link.hung else [link.sock.fileno()])
                if i == 0:
                    continue
                if i >= len(ws.rings):
                    link.hung = True   # read what it published, then say it is gone
                    continue
                if i < 0:
                    self._sync()       # woken: new links, hang-ups, a signal; or the time is up
                return None            # (i > 0: a request waits, the caller serves it)
        finally:
            link.busy -= 1
            if link.hung and not link.busy:
                self._lost(link)

    def forget(self, peer: str) -> None:
        link = self.out.pop(peer, None)
        if link is not None:
            self._close(link, gone=False)

    # ---- for a native data plane ---------------------------------------------------------------
    def inbox_rings(self, known: int = -1
                    ) -> tuple[int, list[tuple[str, Ring, Ring, Any]] | None]:
        """(generation, [(peer, ring, reply ring, verdict)]) of the inbound links (the
        reply ring: ours back to the peer on the same link, where replies go; verdict:
        the endpoint's vouch, None until it was asked); the generation changes
        whenever the list does (a ring in an older list may be unmapped). None for the
        list if the generation is still `known`."""
        self._sync()
        if known == self._gen:
            return known, None
        return self._gen, [(x.peer, x.rx, x.tx, x.verdict) for x in self.inbound]

    def out_ring(self, peer: str) -> Ring | None:
        """The ring that carries our messages to `peer`'s inbox now (None: no link up)."""
        link = self.out.get(peer)
        return None if link is None or link.hung or link.closed else link.tx

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

    # ---- links ----------------------------------------------------------------------------
    def _connect(self, peer: str, address: str, timeout_s: float) -> Link:
        old = self.out.pop(peer, None)
        if old is not None:
            self._close(old, gone=False)
        if not address.startswith(SCHEME):
            raise PeerUnreachable(f"{peer} is at {address}: not an shm address")
        path = address[len(SCHEME):].split("#", 1)[0]
        try:
            want = expected_pid(peer, address)
        except ValueError as exc:
            raise PermissionError(errno.EPERM, str(exc)) from None
        seg, fd = Segment.create(FIT_RING_BYTES, f"fit {self.id}>{peer}")
        model = self.model(peer, path)
        if model is not None:
            seg.set_model(*model)
        try:
            sock, creds, answer, fds = rendezvous.connect(
                path, {"v": 1, "kind": "link", "id": self.id},
                [fd, self.bell.efd, self.bell.page_fd], timeout_s)
        except OSError as exc:
            seg.close()
            raise PeerUnreachable(f"no link to {peer} at {path}: {exc}") from None
        finally:
            os.close(fd)
        try:
            if "errno" in answer:
                raise OSError(answer["errno"], f"{peer} refused us: {answer.get('error')}")
            if creds.uid != os.getuid():
                raise PermissionError(errno.EPERM, f"{path} is not {peer}'s (pid {creds.pid})")
            if want is not None and creds.pid != want:   # the one we knew there is gone
                raise PeerMoved(f"{path} is no longer {peer}'s (pid {creds.pid}, "
                                f"not {want})")
            if len(fds) != 2:
                raise OSError(errno.EPROTO, f"{peer} answered with {len(fds)} descriptors")
            bell = Bell.peer_word(fds[1])
        except BaseException:
            rendezvous.close_all(fds)
            sock.close()
            seg.close()
            raise
        os.close(fds[1])
        link = Link(peer, creds.pid, sock, seg, fds[0], bell, outbound=True)
        self.out[peer] = link
        if self.listener is not None:
            self.listener.watch(sock, link)
        return link

    def model(self, peer: str, path: str) -> Model | None:
        """The model of a link to `peer`, whose rendezvous is at `path` (None: none)."""
        fabric = self.fabric or Fabric.of_run_dir(os.path.dirname(path))
        return fabric.model(self.id, peer) if fabric is not None else None

    def _on_hello(self, sock: socket.socket, creds: rendezvous.Creds, hello: dict[str, Any],
                  fds: list[int]) -> tuple[dict[str, Any], list[int], Any]:
        """The rendezvous thread's: a peer's first contact."""
        claim, kind = hello.get("id"), hello.get("kind")
        why = "not this rack's user" if creds.uid != os.getuid() else check_claim(claim, creds.pid)
        if why is not None:
            rendezvous.close_all(fds)
            self.count("forged" if creds.uid == os.getuid() else "rendezvous_refused")
            return {"errno": errno.EPERM, "error": why}, [], None
        try:
            if kind == "link" and len(fds) == 3:
                seg = Segment.open(fds[0])
                try:
                    bell = Bell.peer_word(fds[2])
                except OSError:
                    seg.close()
                    raise
                os.close(fds[0])
                os.close(fds[2])
                link = Link(claim, creds.pid, sock, seg, fds[1], bell, outbound=False)
                self.listener.watch(sock, link)   # type: ignore[union-attr]  (before the
                # main thread may close it: then its hang-up is seen whatever happens)
                self._new.append(link)
                self.bell.ring()
                return {"ok": True, "id": self.id}, [self.bell.efd, self.bell.page_fd], link
            if kind == "channel" and len(fds) == 2:
                end = self.channels.pop(int(hello.get("token", -1)), None)
                if end is None or end.peer.split(".")[:2] != claim.split(".")[:2]:
                    raise PermissionError(errno.EPERM, "no such channel for this peer")
                end.attach(Segment.open(fds[0]), 1, fds[1])
                os.close(fds[0])
                return {"ok": True}, [end.efd], None
            raise OSError(errno.EPROTO, f"hello of kind {kind!r} with {len(fds)} descriptors")
        except (OSError, ValueError, TypeError) as exc:
            rendezvous.close_all(fds)
            self.count("rendezvous_refused")
            code = exc.errno if isinstance(exc, OSError) and exc.errno else errno.EPROTO
            return {"errno": code, "error": str(exc)}, [], None

    def _on_hangup(self, link: Link) -> None:
        """The rendezvous thread's: a link's peer closed its end."""
        link.hung = True
        self._hung.append(link)
        self.bell.ring()

    def _sync(self) -> None:
        """Take in what the rendezvous thread left: new links, hang-ups."""
        while self._new:
            self.inbound.append(self._new.popleft())
            self._gen += 1
        while self._hung:
            link = self._hung.popleft()
            if link.outbound:   # new sends make a new link; an awaited reply is still read
                if self.out.get(link.peer) is link:
                    del self.out[link.peer]
                self._close(link)
            elif link not in self._held and not link.rx.pending():
                self._close(link)
            else:   # closed once its last message is read: by done(), or here if a
                self._draining.add(link)   # native data plane read it
        for link in [x for x in self._draining if x.closed or (
                x not in self._held and not x.rx.pending())]:
            self._draining.discard(link)
            self._close(link)

    def _close(self, link: Link, gone: bool = True) -> None:
        if link in self._held or link.busy or link.closed:
            return
        if self.listener is not None:
            self.listener.unwatch(link.sock)
        if not link.outbound and link in self.inbound:
            self.inbound.remove(link)
            self._gen += 1
        peer = link.peer
        if link.outbound:
            self.link_closed(peer)
        link.close()
        if gone and peer not in self.out and not any(x.peer == peer for x in self.inbound):
            self.peer_gone(peer)

    def _lost(self, link: Link, counter: str | None = None) -> None:
        """A link that cannot go on (its ring is broken, or its peer is gone)."""
        if counter:
            self.count(counter)
        if link.outbound and self.out.get(link.peer) is link:
            del self.out[link.peer]
        link.hung = True
        self._held.discard(link)
        self._close(link)

    # ---- wait sets ------------------------------------------------------------------------
    def _inbox_set(self) -> tuple[WaitSet, list[Link]]:
        """The inbound rings and their links, in order; those of links whose message a
        handler holds left out (a nested wait must not find that message again). Made
        again only when the links or the held ones change, not per wait."""
        if not self._held:
            if self._inbox_gen != self._gen:
                self._inbox.rings = [x.rx for x in self.inbound]
                self._inbox_links = list(self.inbound)
                self._inbox_gen = self._gen
            return self._inbox, self._inbox_links
        key = (self._gen, frozenset(self._held))
        if self._nested is None or self._nested_key != key:
            links = [x for x in self.inbound if x not in self._held]
            self._nested, self._nested_key = (self._wait_set([x.rx for x in links]), links), key
        return self._nested

    def _reply_set(self, link: Link, serve: bool) -> WaitSet:
        """Ring 0: the link's replies; then, if serving, the inbound rings (as
        _inbox_set() leaves them). Made again only when those change."""
        if not serve or not self.inbound:
            if link._alone is None:
                link._alone = self._wait_set([link.rx], link)
            return link._alone
        if self._held:
            key = (self._gen, frozenset(self._held))
            if link._held_set is None or link._held_key != key:
                ws = self._wait_set([link.rx, *(x.rx for x in self.inbound
                                                if x not in self._held)], link)
                link._held_set, link._held_key = ws, key
            return link._held_set
        if link._serve_gen != self._gen or link._serve_set is None:
            link._serve_set = self._wait_set([link.rx, *(x.rx for x in self.inbound)], link)
            link._serve_gen = self._gen
        return link._serve_set

    def _wait_set(self, rings: list[Ring], link: Link | None = None) -> WaitSet:
        """A wait set of `rings`; for `link`'s calls, with its rendezvous socket watched."""
        ws = WaitSet(self.bell.word, self.bell.efd)
        ws.rings = rings
        if link is not None:
            ws.calls(self._back, FIT_CALL_COPY_BYTES, [link.sock.fileno()], self.spin_s)
        return ws


_arrival = tuple.__new__   # Arrival's fields in order, made in C (a NamedTuple's own
#                           __new__ is Python's: a good part of a served message's time)


def _no_count(name: str) -> None:
    pass


def _no_peer(peer: str) -> None:
    pass
