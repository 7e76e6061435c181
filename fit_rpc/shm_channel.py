"""One end of a FIT channel over shared memory (Transport.channel, shm_transport.py).

A channel joins two objects -- two stubs of a FIT shortcut (splitrack/guest/shortcuts.py)
-- with a segment of its own: ring 0 carries the messages of the end that
connected, ring 1 the other's. Each side has a bell word in the segment and an
eventfd, so either end sleeps on its own fd (fileno/arm/disarm) and no
endpoint's inbox is woken for a channel's traffic. An end is reached at its
endpoint's rendezvous with a token (`shm://PATH#PID!TOKEN`): the peer's end
connects there, and the endpoint's rendezvous hands it the segment (attach).
With an interconnect model (shm_transport.py) the connecting end gives the
segment the model of its link, and an end's fileno() is a Waker, as an
endpoint's is.
"""

import errno
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from fit_rpc import rendezvous, tracing
from fit_rpc.errors import PeerUnreachable
from fit_rpc.header import HEADER_SIZE
from fit_rpc.identity import address_pid
from fit_rpc.params import (
    FIT_CALL_COPY_BYTES,
    FIT_CALL_TIMEOUT_S,
    FIT_MAX_PAYLOAD_BYTES,
    FIT_RING_BYTES,
)
from fit_rpc.transport import Frame
from native.fitring import NEVER, Counts, Segment, WaitSet, Waker, ffi, landing, lib
from native.ring import ring_error

_current = tracing.current   # .ctx: the trace context messages are sent in (None: untraced)

SCHEME = "shm://"


class ShmChannel:
    """One end of a channel (Transport.channel): a segment of its own, ring 0 from
    the end that connected, a bell word per side in the segment, an eventfd per end.
    `address` is where the peer's end connects (this endpoint's rendezvous and a
    token); connect() to the peer's end's address, unless the peer connected first.
    send() from one thread at a time, recv() from one thread at a time."""

    def __init__(self, transport: Any, peer: str):
        self._t = transport
        self.peer = peer
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.token = secrets.randbits(62)
        self.address = f"{transport.address}!{self.token:x}"
        self._attached = threading.Event()
        self.seg: Segment | None = None
        self.tx: Any = None
        self.rx: Any = None
        self._ws: WaitSet | None = None
        self._landing, self._landing_handle = landing(FIT_CALL_COPY_BYTES)   # recv() reads here
        self._counts = Counts()   # what post() and recv() count, in C
        self.caller: Any = None   # its WaitSet's fs_caller, for a reader that copies (no
        #                           model): reader()'s, or a caller's own fs_recv_into
        self.waker = Waker(self.efd) if transport.fabric is not None else None
        self._peer_efd = -1
        self._closed = False
        transport.channels[self.token] = self

    def attach(self, seg: Segment, side: int, peer_efd: int) -> None:
        self.seg, self._peer_efd = seg, peer_efd
        self.tx = seg.ring(side, seg.bell_word(1 - side), peer_efd)
        self.rx = seg.ring(1 - side, None, peer_efd)
        ws = WaitSet(seg.bell_word(side), self.efd)
        ws.rings = [self.rx]
        ws.calls(self._landing_handle, FIT_CALL_COPY_BYTES, [], self._t.spin_s,
                 self._counts.handle)
        self._ws = ws
        if self.waker is None:   # (a model's due times are recv()'s to wait for)
            self.caller = ws.caller()
        self._attached.set()
        os.eventfd_write(self.efd, 1)   # whoever sleeps on it looks again

    def connect(self, address: str) -> None:
        """Join the peer's end at `address` (nothing to do if it joined us first)."""
        if self._attached.is_set():
            return
        where, _, token = address.rpartition("!")
        path = where[len(SCHEME):].split("#", 1)[0]
        seg, fd = Segment.create(FIT_RING_BYTES, f"fit channel {self._t.id}>{self.peer}")
        model = self._t.model(self.peer, path)
        if model is not None:
            seg.set_model(*model)
        try:
            sock, creds, answer, fds = rendezvous.connect(
                path, {"v": 1, "kind": "channel", "id": self._t.id, "token": int(token, 16)},
                [fd, self.efd], FIT_CALL_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            seg.close()
            raise OSError(getattr(exc, "errno", None) or errno.ECONNREFUSED,
                          f"no channel at {address}: {exc}") from None
        finally:
            os.close(fd)
        sock.close()
        if "errno" in answer or len(fds) != 1 or creds.pid != address_pid(where):
            rendezvous.close_all(fds)
            seg.close()
            raise OSError(answer.get("errno") or errno.EPERM, f"no channel at {address}")
        self._t.channels.pop(self.token, None)
        self.attach(seg, 0, fds[0])

    def send(self, frame: Frame, timeout_s: float, head: bytes = b"") -> None:
        """Queue one message for the peer's end; PeerUnreachable if it takes none in time."""
        self._await_attached(timeout_s)
        tx = self.tx
        if tx.send(head, frame) or (tx.wait_space(len(head) + len(frame), self.efd,
                                                  self._t.spin_s, timeout_s)
                                    and tx.send(head, frame)):
            return
        raise PeerUnreachable(f"channel to {self.peer}: its ring stayed full")

    def _await_attached(self, timeout_s: float) -> None:
        """Until the peer's end joined (PeerUnreachable if not within timeout_s)."""
        if not self._attached.is_set() and not self._attached.wait(timeout_s):
            raise PeerUnreachable(f"channel to {self.peer} not connected")

    def post(self, op: int, frame: Frame, timeout_s: float, head: bytes = b"") -> None:
        """send() of an untraced ONEWAY message, its header written and the message
        counted in C (fitserve.h: fs_post); PeerUnreachable as send() says."""
        tx = self.tx
        if tx is not None and tx.post(op, head, frame, self._counts.handle):
            return
        self._await_attached(timeout_s)
        tx, counts = self.tx, self._counts.handle   # (as send(): one wait for room)
        if tx.post(op, head, frame, counts) or (
                tx.wait_space(HEADER_SIZE + len(head) + len(frame), self.efd, self._t.spin_s,
                              timeout_s) and tx.post(op, head, frame, counts)):
            return
        raise PeerUnreachable(f"channel to {self.peer}: its ring stayed full")

    def poster(self, op: int, head: bytes, general: Callable[[Frame], None]
               ) -> Callable[[Frame], None]:
        """post(payload): post() of op and head bound once, for a sender of many (the
        FIT shortcut's data): one native call a message (fs_post, counted) while the
        end is attached, nothing is traced and the ring has room; else
        general(payload), the caller's send() (it waits for room, traces, raises).
        Three layers of Python fewer a message: 0.3 us a FIT shortcut's round
        trip (docs/evaluation.md)."""
        counts, nhead, most = self._counts.handle, len(head), FIT_MAX_PAYLOAD_BYTES - len(head)
        post, from_buffer = lib.fs_post, ffi.from_buffer

        def fast(payload: Frame) -> None:
            tx, n = self.tx, len(payload)
            if tx is None or _current.ctx is not None or n > most or post(
                    tx.r, counts, op, head, nhead,
                    payload if type(payload) is bytes else from_buffer(payload), n):
                general(payload)
        return fast

    def reader(self, op: int, skip: int, parsed: Callable[[bytes], Any],
               general: Callable[[float], Any]) -> Callable[[Any, float], Any]:
        """read(view, timeout_s) bound once, for a reader of many (the FIT shortcut's):
        one native call a message (fs_recv_into). A well-formed, untraced one-way
        message of `op` whose payload after its first `skip` bytes fits the writable
        buffer `view` is copied there from the ring: the count (an int); any other
        plain one-way message is (op, payload); any other frame read goes to
        parsed(frame) (the caller's); view None: nothing is copied (recv()). All
        counted in C but the parsed. Nothing within timeout_s, a message too large
        for the landing, a broken ring, an end not attached yet or one with a fabric
        model: general(), the caller's recv(), says what is there (0: does not wait
        again)."""
        recv, null, from_buffer = lib.fs_recv_into, ffi.NULL, ffi.from_buffer

        def read(view: Any, timeout_s: float) -> Any:
            c = self.caller
            if c is None:
                return general(timeout_s)
            k = recv(c, int(timeout_s * 1e9) if timeout_s > 0 else 0, op, skip,
                     null if view is None else from_buffer("char[]", view, True),
                     0 if view is None else len(view))
            return k if k > 0 else self.landed(k, parsed, general)
        return read

    def landed(self, k: int, parsed: Callable[[bytes], Any], general: Callable[[float], Any]
               ) -> Any:
        """What an fs_recv_into on `caller` that copied nothing (k <= 0) read, as
        reader()'s read says it: (op, payload), parsed(frame), or general(0)."""
        c = self.caller
        if k == -errno.EINTR:   # a native program's call that a signal ends (fitring.h)
            raise ring_error(k, "recv")
        if k != lib.FS_LANDED or c is None:
            return general(0)
        if c.plain:
            return c.op, memoryview(self._landing[HEADER_SIZE:c.len].tobytes())
        return parsed(bytes(self._landing[:c.len]))

    def counted(self) -> list[tuple[int, int, int, int, int]]:
        """What post() and recv() counted since the last call (transport.py)."""
        return self._counts.taken()

    def recv(self, timeout_s: float) -> tuple[int, memoryview] | bytes | None:
        """The next message, waiting up to timeout_s, read into this end's landing in
        one native call (fitserve.h: fs_recv): (op, payload) if it is a well-formed,
        untraced one-way message (its header read there), else its frame, for the
        caller to parse; either a copy, the caller's to keep. None: none came."""
        ws = self._ws
        if ws is None:
            if timeout_s <= 0 or not self._attached.wait(timeout_s):
                return None
            ws = self._ws
        deadline = time.monotonic() + timeout_s
        while True:
            n = ws.recv(timeout_s)
            if n >= 0:
                if ws.plain:
                    return ws.op, memoryview(self._landing[HEADER_SIZE:n].tobytes())
                return bytes(self._landing[:n])
            view = self.rx.peek()   # one too large for the landing, or none
            if view is not None:
                data = bytes(view)
                self.rx.consume()
                return data
            timeout_s = deadline - time.monotonic()
            if timeout_s <= 0 or ws.next_due() == NEVER:
                return None   # (else rung for a message not due yet: wait on, until it is)

    def fileno(self) -> int:
        return self.efd if self.waker is None else self.waker.fileno()

    def pending(self) -> bool:
        return self.rx is not None and self.rx.pending()

    def arm(self) -> bool:
        return True if self._ws is None else self._ws.arm_with(self.waker)

    def disarm(self) -> None:
        if self.waker is not None:
            self.waker.at(0)
        if self._ws is not None:
            self._ws.disarm()
        else:
            try:
                os.eventfd_read(self.efd)
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._t.channels.pop(self.token, None)
        if self.seg is not None:
            self.seg.close()
            os.close(self._peer_efd)
        if self.waker is not None:
            self.waker.close()
        os.close(self.efd)
