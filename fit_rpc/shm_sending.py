"""The send side of a ShmTransport (shm_transport.py): requests, one-way messages, replies.

`ShmSending` is the part of ShmTransport that writes into a peer's ring; its
state is the transport's. Interface (transport.py's contract):
    send(peer, address, frame, t, head)   a message onto our link to peer (made
                                          first if there is none, or it hung up)
    post(peer, op, frame, t)              an untraced one-way message, its header
                                          written and counted in C, on a link that
                                          is up; False: nothing sent
    call(peer, op, seq, frame, t, serve)  a request sent and its reply read in
                                          one native step (native/fitserve.h), on a
                                          link that is up; False: nothing sent
    call_native(peer, seq, step, t, serve)  the same, made by the caller's C step
    reply(route, frame, head)             a reply back on the link it came on
    out_ring(peer)                        the ring to peer's inbox, for a native
                                          data plane
Invariants: a full ring is waited on (spinning, then on the bell) up to the
timeout, then PeerUnreachable (a reply: FIT_REPLY_WAIT_S, then dropped and
counted `reply_dropped`). A broken ring ends its link and is counted
`ring_broken` (and PeerUnreachable raised, but for a reply). A link a caller
waits on (busy) is not closed under it: the last caller out closes a link
that hung up meanwhile.
"""

import errno
import os
from collections.abc import Callable
from typing import Any

from fit_rpc.errors import PeerUnreachable
from fit_rpc.header import HEADER_SIZE
from fit_rpc.params import FIT_REPLY_WAIT_S
from fit_rpc.shm_links import Link
from fit_rpc.transport import STEP_READ, Frame
from native.fitring import SENT, Ring, RingBroken


class ShmSending:
    """ShmTransport's send side: send, call, reply."""

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

    def post(self, peer: str, op: int, frame: Frame, timeout_s: float) -> bool:
        link = self.out.get(peer)
        if link is None or link.hung:
            return False
        tx, counts = link.tx, link.counts.handle
        try:
            if tx.post(op, b"", frame, counts) or (
                    tx.wait_space(HEADER_SIZE + len(frame), self.bell.efd, self.spin_s, timeout_s)
                    and tx.post(op, b"", frame, counts)):
                return True
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
                if not tx.request(op, seq, frame):
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
            got = step(ws.caller(), link.tx.r, seq, int(timeout_s * 1e9) if timeout_s > 0 else 0)
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

    # ---- for a native data plane ---------------------------------------------------------------
    def out_ring(self, peer: str) -> Ring | None:
        """The ring that carries our messages to `peer`'s inbox now (None: no link up)."""
        link = self.out.get(peer)
        return None if link is None or link.hung or link.closed else link.tx
