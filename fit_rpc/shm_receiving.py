"""The receive side of a ShmTransport (shm_transport.py): the inbox and replies.

`ShmReceiving` is the part of ShmTransport that takes messages in; its state
is the transport's. Interface (transport.py's contract):
    fileno(), arm(), disarm(), pending()   readiness, for an outside loop
    recv_inbound(t) -> Arrival | None      a peer's request or one-way message,
                                           read in place in its ring
    answer(arrival, op, seq, frame)        a reply written and the request freed,
                                           in one step (a plain request only)
    done(arrival)                          the request's slot freed
    recv_reply(peer, t, serve)             the next frame back on our link to peer
    inbox_rings(known)                     the inbound rings, for a native data plane
    serve_natively(native)                 a native data plane's take() is the inbox's
                                           wait from now on (it answers in C what it
                                           can): native.inbox(links) -> bool (it reads
                                           these: inbox_rings()'s list), native.take(
                                           spin_s, timeout_s, msg) -> as WaitSet.take()
                                           (native/waitset.py)
Invariants: one message per inbound link is held at a time (_held: taken,
not yet done()); a nested wait (a handler's call) leaves held links out, so
it cannot find that message again. The wait sets (_inbox_set, _reply_set)
are made again only when the links or the held ones change, not per wait:
each watches the endpoint's one bell, and a call's also its link's
rendezvous socket (its hang-up). A hung link is closed once all its peer
published is read (by done() or answer(), or by _sync() if a native data
plane read it).
"""

import errno
from typing import Any

from fit_rpc.errors import PeerUnreachable
from fit_rpc.params import FIT_CALL_COPY_BYTES
from fit_rpc.shm_links import Link
from fit_rpc.transport import Arrival, Frame
from native.fitring import NEVER, WOKEN, Ring, RingBroken, WaitSet


class ShmReceiving:
    """ShmTransport's receive side: readiness, the inbox, replies, wait sets."""

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

    # ---- receiving ----------------------------------------------------------------------------
    def recv_inbound(self, timeout_s: float | None) -> Arrival | None:
        if self._new or self._hung or self._draining:
            self._sync()
        if self._held or self._inbox_gen != self._gen or self._unvouched:
            ws, links = self._inbox_set()
        else:   # (_inbox_set()'s common case, in line: this runs for every message)
            ws, links = self._inbox, self._inbox_links
        plane = self._plane   # a native data plane answers what it can first, in C
        if plane is not None and ws is self._inbox:
            i = plane.take(self.spin_s, timeout_s, ws.msg)
        else:
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
        try:   # (the request and its reply counted in C: transport.py)
            if not link.tx.answer(link.rx, op, seq, frame, link.counts.handle,
                                  len(arrival.frames[0])):
                return False
        except RingBroken:
            return False   # (reply() finds it so and says so)
        self._held.discard(link)   # released: done()'s work is done, but for
        if link.hung:                  # a hung link's end
            self._close_if_drained(link)
        return True

    def done(self, arrival: Arrival) -> None:
        link: Link = arrival.link
        if link in self._held:
            self._held.discard(link)
            if not link.closed:   # (a held link is not closed: _close waits for it)
                head = arrival.head
                if head is None:
                    link.rx.consume()
                else:   # counted in C, as fs_take found it plain (transport.py)
                    link.rx.release(link.counts.handle, head[1], len(arrival.frames[0]))
        if link.hung:   # (_close_if_drained's test first: this runs for every message)
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
        return self._gen, _ring_list(self.inbound)

    def inbox_bell(self) -> Any:
        """The inbox's bell word (a uint32_t *), whose FR_BELL_CPU word a native data
        plane that waits on the inbox itself keeps up to date (native/fitring.h)."""
        return self.bell.word

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
                self._plane_inbox()
            elif self._unvouched:
                self._plane_inbox()
            return self._inbox, self._inbox_links
        key = (self._gen, frozenset(self._held))
        if self._nested is None or self._nested_key != key:
            links = [x for x in self.inbound if x not in self._held]
            self._nested, self._nested_key = (self._wait_set([x.rx for x in links]), links), key
        return self._nested

    def serve_natively(self, native: Any) -> None:
        self._native = native
        self._inbox_gen = -1   # (told the rings at the next wait)

    def _plane_inbox(self) -> None:
        """The native inbox (serve_natively's, if any) told the inbox's rings, as
        inbox_rings() lists them; it reads them (_plane) if it said it can. Told
        again while a link is not vouched for yet (its verdict then matters)."""
        native = self._native
        if native is None:
            self._plane, self._unvouched = None, False
            return
        links = _ring_list(self._inbox_links)
        self._unvouched = any(verdict is None for _, _, _, verdict in links)
        self._plane = native if native.inbox(links) else None

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
            ws.calls(self._back, FIT_CALL_COPY_BYTES, [link.sock.fileno()], self.spin_s,
                     link.counts.handle, link.pid or 0)
        return ws


def _ring_list(links: list[Link]) -> list[tuple[str, Ring, Ring, Any]]:
    """[(peer, ring, reply ring, verdict)] of inbound links, as a native data plane
    is told them (inbox_rings, serve_natively)."""
    return [(x.peer, x.rx, x.tx, x.verdict) for x in links]


_arrival = tuple.__new__   # Arrival's fields in order, made in C (a NamedTuple's own
#                           __new__ is Python's: a good part of a served message's time)
