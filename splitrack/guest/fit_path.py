"""A FIT shortcut's data path: two programs on different pComponents, over a FIT channel.

The intra-rack shortcut between two stubs of different pComponents (shortcuts.py
makes it, at connect() and at accept()) is a FIT channel of the two stubs' own
(Endpoint.channel, beside the processes' inboxes): STUB_SC_DATA, STUB_SC_CREDIT
and STUB_CLOSED in order, windows as on the ordinary path. `FitPath` is the
stub's data path over it (datapath.py), and uses only the stub's face (face.py).
Its reader is a thread waiting on the socket (as a pipe's; the process's inbox
is looked at between slices), a native program's poll, select or epoll wait
once the process is polled, or, once it is threaded, the inbox thread
(Runtime.watch). Ends: close or SHUT_WR is EOF for the peer; a peer that
closed makes later sends EPIPE (STUB_CLOSED with PEER_CLOSED); one that dies
is found by its PID within PEER_CHECK_S (a waiting stub, or the inbox thread)
and is ECONNRESET. Its methods run with the stub's lock held, but for the
waits and the reader's.
"""

import errno
import os
import socket
import threading
import time
from collections import deque
from typing import Any

import psutil

from fit_rpc import Op
from fit_rpc.netpath import SK, SK_ERR, SK_N
from native.fitring import ffi, lib
from splitrack.params import (
    PEER_CHECK_S,
    SHORTCUT_FIT_WINDOW_BYTES,
    SKELETON_LINGER_S,
    SOCKET_BUFFER_BYTES,
    SOCKET_CREDIT_BYTES,
    STUB_FOLLOWER_SLICE_S,
    STUB_PUSH_TIMEOUT_S,
)
from splitrack.rundir import identify

PEER_CLOSED = -1       # STUB_CLOSED's value when a FIT peer closed (not only SHUT_WR)
_SC_DATA, _SC_CREDIT = int(Op.STUB_SC_DATA), int(Op.STUB_SC_CREDIT)   # plain ints: faster
_recv_into, _from_buffer = lib.fs_recv_into, ffi.from_buffer
# Credit goes back once this much was read: the same share of the window as on the
# ordinary path. (A credit that comes ahead of an answer costs its reader a wake-up.)
_FIT_CREDIT_BYTES = SHORTCUT_FIT_WINDOW_BYTES * SOCKET_CREDIT_BYTES // SOCKET_BUFFER_BYTES


class FitPath:
    """Different pComponents: a FIT channel between the two stubs.

    `reading` is held by whoever reads the channel: a waiting thread for a slice,
    a native program's polled wait for its sleep, or the inbox thread for as long
    as it watches it; whoever holds it once the path is released closes the
    channel (`let_go`)."""

    name = "fit"
    pump_due = False   # (a NicPath's: its sender reads the inbox)
    packs = False      # (a NicPath's: no sends held back here)

    def __init__(self, stub: Any, peer: str, peer_stub: int = 0, channel: str | None = None):
        self.stub = stub._face   # (face.py: all of the stub a path may touch)
        self.rt = self.stub.runtime
        self.peer = peer
        pid = int(peer.split(".")[1])
        try:
            self.peer_created = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            self.peer_created = 0.0
        self.peer_pid = pid
        # what the stub sent before close() still leaves, as a closed skeleton's does
        self.channel = self.rt.channel(peer, SKELETON_LINGER_S)
        self._read_msg = self.channel.reader(_SC_DATA, SK.size)   # (its recv, bound once)
        self._lane = self.channel.lane()   # (shm: take_next's copy is its own native call)
        self.reading = threading.Lock()
        self.released = False
        self.rx: deque[memoryview] = deque()   # received chunks, in order
        self.unacked = 0        # read by take(), not yet credited (the stub's lock)
        self.unacked_next = 0   # ... by take_next() (`reading`): each credits its own
                                # (two credit thresholds, a quarter each, < the window)
        self.credit = SHORTCUT_FIT_WINDOW_BYTES
        self.closed_sent = False
        self.checked = time.monotonic()
        self.peer_stub, self.head = 0, b""
        self._send_data = self.channel.sender(_SC_DATA, STUB_PUSH_TIMEOUT_S)   # (connected())
        if channel is not None:
            try:
                self.connected(peer_stub, channel)
            except OSError:
                self.channel.close()
                raise
        self.rt.watch(self)

    def connected(self, peer_stub: int, channel: str) -> None:
        """The peer stub's id and channel (the connector learns them from the answer)."""
        self.channel.connect(channel)
        self.peer_stub = peer_stub
        self.head = SK.pack(peer_stub)   # every STUB_SC_DATA starts with it
        self._send_data = self.channel.sender(_SC_DATA, STUB_PUSH_TIMEOUT_S, self.head)

    def take(self, want: int, view: memoryview | None, peek: bool) -> Any:
        rx = self.rx
        if not rx:
            return None
        data = rx[0]
        if len(data) < want and len(rx) > 1:   # as from a stream: all that waits
            data = self._gather(want, peek)
        elif len(data) > want:
            data = data[:want]
            if not peek:
                rx[0] = rx[0][want:]
        elif not peek:
            rx.popleft()
        k = len(data)
        if not peek:
            self.unacked += k
            if self.unacked >= _FIT_CREDIT_BYTES:
                self._tell(_SC_CREDIT, SK_N.pack(self.peer_stub, self.unacked))
                self.unacked = 0
            if not rx:
                self.stub.drained()
        if view is None:
            return bytes(data)
        view[:k] = data
        return k

    def take_next(self, want: int, view: memoryview | None, deadline: float | None
                  ) -> Any:
        """A blocking recv's fast lane (receiving.py; the stub's lock not held, and the
        stub has no error, EOF or shutdown): the next message read from the channel
        straight to the caller -- bytes, or the count read into view (copied from the ring:
        fs_recv_into) -- if it is data and `want` takes all of it; None for the
        general way to look: anything else (delivered, as _read does), nothing within
        PEER_CHECK_S (the inbox pumped, the peer checked), another reader, the
        deadline past. Without the bell, take() and the stub's lock: half of a round
        trip's Python (docs/evaluation.md). Into a view on shm, fs_recv_into is called
        from here, not through the reader's closure, and let_go's common case is in
        line: with both ends on one core, those two frames (and _recv's _deadline)
        were 1 us of a round trip's 10.4 (docs/evaluation.md)."""
        if not self.reading.acquire(False):   # (not blocking: a keyword costs here)
            return None   # the inbox thread reads the channel, or another waiter does
        credit = 0
        try:
            if self.rx or self.released:   # (looked at once the channel is ours)
                return None
            most = PEER_CHECK_S if deadline is None else deadline - time.monotonic()
            if most > PEER_CHECK_S:
                most = PEER_CHECK_S
            elif most <= 0:
                return None
            lane = self._lane
            c = None if lane is None or view is None else lane.caller
            if c is not None:
                k = _recv_into(c, int(most * 1e9), _SC_DATA, SK.size,
                               _from_buffer("char[]", view, True), want)
                got = k if k > 0 else self.channel.landed(k)
            else:
                got = self._read_msg(view if view is None or want == len(view) else view[:want],
                                     most)
            if type(got) is int:
                k = got
            elif got is None:   # a slice went by: the inbox's turn; is the peer alive?
                self.rt.pump()
                self.check_peer()
                return None
            else:
                op, payload = got
                k = len(payload) - SK.size
                if op != _SC_DATA or not 0 < k <= want:
                    self._deliver(op, payload)
                    return None
                if view is None:
                    got = bytes(payload[SK.size:])
                else:
                    view[:k] = payload[SK.size:]
                    got = k
            self.unacked_next += k   # (take()'s count is the stub lock's, this `reading`'s)
            if self.unacked_next >= _FIT_CREDIT_BYTES:
                credit, self.unacked_next = self.unacked_next, 0
        finally:
            self.reading.release()   # (let_go's, in line)
            if self.released:
                self._close_unread()
        if credit:
            with self.stub.lock:   # (the channel's sends are the lock's)
                self._tell(_SC_CREDIT, SK_N.pack(self.peer_stub, credit))
        return got

    def _gather(self, want: int, peek: bool) -> bytes:
        """The bytes of the chunks that wait, up to `want`, in one piece (taken from rx
        unless peek). (The common case, one chunk, needs no gathering.)"""
        rx, parts, k = self.rx, [], 0
        for data in rx:
            if len(data) >= want - k:
                parts.append(data[:want - k])
                break
            parts.append(data)
            k += len(data)
        if not peek:
            for _ in range(len(parts) - 1):
                rx.popleft()
            rest = rx[0][len(parts[-1]):]
            if rest:
                rx[0] = rest
            else:
                rx.popleft()
        return b"".join(parts)

    def pushed(self, op: int, payload: memoryview) -> None:
        if op == _SC_CREDIT:   # (data is delivered by _deliver)
            self.credit += SK_N.unpack_from(payload)[1]
            self.stub.wake_senders()

    def put(self, chunk: memoryview) -> int:
        n = len(chunk)
        if n > self.credit or n > SHORTCUT_FIT_WINDOW_BYTES // 2:   # (< the FIT limit)
            n = min(self.credit, n, SHORTCUT_FIT_WINDOW_BYTES // 2)
        if n:
            try:
                self._send_data(chunk if n == len(chunk) else chunk[:n])
            except OSError:   # the peer's end takes nothing: it is gone
                raise OSError(errno.ECONNRESET, os.strerror(errno.ECONNRESET)) from None
            self.credit -= n
        return n

    def _tell(self, op: int, payload: bytes) -> bool:
        """One message to the peer stub; False if its end takes none (it is gone)."""
        try:
            self.channel.send(op, payload, STUB_PUSH_TIMEOUT_S)
            return True
        except OSError:
            return False

    def pending(self) -> int:
        return sum(len(data) for data in self.rx)

    def can_send(self) -> bool:
        return self.credit > 0

    def roomy(self) -> bool:
        return 3 * self.credit >= SHORTCUT_FIT_WINDOW_BYTES

    # ---- waiting: the waiter reads the channel, unless another thread does ----------------
    def wait_readable(self, deadline: float | None) -> bool:
        return self._wait(self.stub.readable, deadline, self.stub.park_readable)

    def wait_writable(self, deadline: float | None) -> bool:
        return self._wait(self.stub.can_send, deadline, self.stub.park_writable)


    def _wait(self, ready: Any, deadline: float | None, park: Any) -> bool:
        """Until ready() (True) or the deadline (False)."""
        while not ready():
            if self.released:
                return True   # closed meanwhile: the caller finds out
            if deadline is None:
                most = PEER_CHECK_S
            else:
                most = min(deadline - time.monotonic(), PEER_CHECK_S)
                if most <= 0:
                    return False
            if not self.reading.acquire(blocking=False):
                # the inbox thread reads it (and rings the stub), or another waiter does
                park(most if self.rt.threaded else min(most, STUB_FOLLOWER_SLICE_S))
                self.check_peer()
                continue
            try:
                if not ready():
                    self._read(most)
            finally:
                self.let_go()
        return True

    def _read(self, timeout: float) -> None:
        if self.channel.pending() and self.drain():   # a sender ahead of its reader: all
            return   # that waits, for one recv (an echo's reader looks before its answer)
        got = self._read_msg(None, timeout)
        if got is not None:
            self._deliver(*got)
        else:   # a slice went by: the process's inbox's turn; is the peer alive?
            self.rt.pump()
            self.check_peer()

    def _deliver(self, op: int, payload: memoryview) -> None:
        """A message from the channel, by its reader (the stub's lock not held)."""
        if op != _SC_DATA:
            self.stub.pushed(op, payload)   # credit, STUB_CLOSED
            return
        stub = self.stub
        lock = stub.lock
        lock.acquire()   # (not `with`: a hot path, and a Condition's `with` is Python's)
        try:
            if not stub.dead and len(payload) > SK.size:
                self.rx.append(payload[SK.size:])   # a channel's payloads are ours to keep
                stub.wake()
        finally:
            lock.release()

    def drain(self) -> bool:
        """The inbox thread's, a polled wait's (inbox_reader.py) or a waiting thread's
        (_read), holding `reading`: every message waiting on the channel; whether
        there was any."""
        got_any = False
        while (got := self._read_msg(None, 0)) is not None:
            self._deliver(*got)
            got_any = True
        return got_any

    def let_go(self) -> None:
        """Release `reading` -- and close the channel, if the path was released
        meanwhile (whoever then takes `reading` closes it; nobody gives it back)."""
        self.reading.release()
        if self.released:
            self._close_unread()

    def _close_unread(self) -> None:
        """The path was released while `reading` was held: whoever takes it now
        closes the channel."""
        if self.reading.acquire(blocking=False):
            self.channel.close()

    def check_peer(self) -> bool:
        """Checked at most every PEER_CHECK_S: a dead peer process is a reset."""
        now = time.monotonic()
        if now - self.checked < PEER_CHECK_S:
            return False
        self.checked = now
        if identify(self.peer_pid, self.peer_created) is not None:
            return False
        with self.stub.lock:
            self.stub.set_error(errno.ECONNRESET, after_eof=False)
        self.closed_sent = True   # nobody to tell
        return True

    def shutdown(self, how: int) -> None:
        if how in (socket.SHUT_WR, socket.SHUT_RDWR) and not self.closed_sent:
            self.closed_sent = True
            self._tell(Op.STUB_CLOSED, SK_ERR.pack(self.peer_stub, 0))

    def release(self) -> None:
        if self.peer_stub:   # the peer's later sends fail (EPIPE), as to a closed TCP socket
            self._tell(Op.STUB_CLOSED, SK_ERR.pack(self.peer_stub, PEER_CLOSED))
        self.released = True
        self.rt.unwatch(self)
        if self.reading.acquire(blocking=False):
            self.channel.close()   # nobody reads it; else its reader closes it (let_go)
