"""The links of a ShmTransport (shm_transport.py): made, accepted, hung up, closed.

`ShmLinks` is the part of ShmTransport that keeps its links; its state is the
transport's. A `Link` joins two endpoints: a segment of two rings, the
peer's bell and the rendezvous socket (shm_transport.py says which ring
carries what). Interface, within the transport:
    _connect(peer, address, t)   the connector's side: a new segment handed over at
                                 the peer's rendezvous (checked: SO_PEERCRED, the
                                 pid the address names; PeerMoved if it is another's)
    model(peer, path)            the interconnect model of a link to peer (fabric.py)
    _on_hello, _on_hangup        the rendezvous thread's: a peer's first contact (a
                                 link, or a channel's segment), a link's hang-up
    _sync()                      takes in what the rendezvous thread left
    _close(link), _lost(link)    a link's end; forget(peer): ours, by choice
    counted()                    what the links counted in C (transport.py); a closed
                                 link's last counts go to add_counts as it closes
Invariants: the rendezvous thread only adds links and marks hang-ups (the
deques _new and _hung), and rings the bell; every other change happens in the
thread that uses the endpoint (_sync() takes those two in). A link is not closed while a
handler holds its message (_held) or a caller waits on it (busy): the last
of them closes it. An inbound link that hung up is closed once everything
its peer published is read. link_closed(peer) is called before an outbound
link's ring goes, add_counts with what a link counted last as it closes,
and peer_gone(peer) when a peer's last link closed.
"""

import errno
import os
import socket
from typing import Any

from fit_rpc import rendezvous
from fit_rpc.errors import PeerMoved, PeerUnreachable
from fit_rpc.fabric import Fabric, Model
from fit_rpc.identity import check_claim, expected_pid
from fit_rpc.params import FIT_RING_BYTES
from fit_rpc.shm_channel import SCHEME
from native.fitring import Bell, Counts, Segment, WaitSet


class Link:
    """One connection between two endpoints: its segment, rings and rendezvous socket."""

    __slots__ = ("peer", "pid", "sock", "seg", "tx", "rx", "peer_efd", "peer_bell", "outbound",
                 "hung", "closed", "busy", "verdict", "counts", "_serve_set", "_serve_gen",
                 "_alone", "_held_set", "_held_key")

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
        self.counts = Counts()              # what it carried in full, counted in C
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


class ShmLinks:
    """ShmTransport's links: connect, accept, take in, close."""

    def forget(self, peer: str) -> None:
        link = self.out.pop(peer, None)
        if link is not None:
            self._close(link, gone=False)

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
        self.add_counts([(peer, *row) for row in link.counts.taken()])   # (before peer_gone
        if link.outbound:                                                # folds its counts)
            self.link_closed(peer)
        link.close()
        if gone and peer not in self.out and not any(x.peer == peer for x in self.inbound):
            self.peer_gone(peer)

    def counted(self) -> list[tuple[str, int, int, int, int, int]]:
        return [(link.peer, *row) for link in [*self.out.values(), *self.inbound]
                for row in link.counts.taken()]

    def _lost(self, link: Link, counter: str | None = None) -> None:
        """A link that cannot go on (its ring is broken, or its peer is gone)."""
        if counter:
            self.count(counter)
        if link.outbound and self.out.get(link.peer) is link:
            del self.out[link.peer]
        link.hung = True
        self._held.discard(link)
        self._close(link)
