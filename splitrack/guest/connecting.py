"""connect() of a bsdSocketStub: a shortcut to a rack listener, else a skeleton.

`Connecting` is the part of BsdSocketStub (stub.py) that connects; its state
is the stub's. A blocking connect returns once connected, or raises the
kernel's error (TimeoutError past the timeout); a handshake that waits ends
early as Linux's does, and goes on meanwhile as a non-blocking connect's: at
SO_SNDTIMEO (EINPROGRESS; a second connect's wait too: EALREADY), or when a
native program's handler without SA_RESTART runs, or any with SO_SNDTIMEO
(EINTR: native/preload_signal.c). A non-blocking one answers as
Linux does: EINPROGRESS, even on loopback; then SO_ERROR (getsockopt calls
`_settle`) or the next connect() says how it went -- EALREADY while the
kernel's handshake goes on, 0 or the error once (ECONNABORTED if SO_ERROR took
it), then EISCONN (or, after a failure, a new attempt).

Through a skeleton: one N_CONNECT to the nComponent GNM named, whose kernel
socket connects there (in the nComponent's data plane, from a socket it made
before: native/skelconnect.h). If its handshake is not done at once (a full
accept queue drops the SYN), the answer is {pending}, and STUB_CONNECTED ends
it (stub.py's _pushed sets `_connected`).
"""

import contextlib
import errno
import os
import time
from typing import Any

from fit_rpc import Op
from fit_rpc.netpath import connect_request, unpack_connected
from splitrack.guest import preloaded
from splitrack.guest.nic_path import NicPath
from splitrack.guest.sockargs import err
from splitrack.guest.sockopts import LINGER, SNDTIMEO
from splitrack.params import CONNECT_TIMEOUT_S


class Connecting:
    """BsdSocketStub's connect() and connect_ex(), and their state machine."""

    __slots__ = ()   # (its state is the stub's)

    def connect(self, address: Any) -> None:
        self._alive()
        ip, port = self._to_rack(address)
        if self._started:   # a non-blocking connect began: this call says how it went
            return self._connect_again()
        if self._peer is not None or self._listening:   # (Linux: one not in TCP_CLOSE)
            raise err(errno.EISCONN)
        if self._timeout != 0.0:
            return self._connect(ip, port, wait=True)
        # Non-blocking: EINPROGRESS, as Linux says even on loopback; how it went is
        # for SO_ERROR (once fileno() is writable) or the next connect
        self._started = True
        try:
            self._connect(ip, port, wait=False)
        except OSError as exc:
            with self._lock:
                self._error = exc.errno or errno.EIO
                self._ring()
        raise BlockingIOError(errno.EINPROGRESS, os.strerror(errno.EINPROGRESS))

    def _connect(self, ip: str, port: int, wait: bool) -> None:
        """Connect by a shortcut or through a skeleton. wait=False: a handshake the
        kernel has not finished is left to STUB_CONNECTED (`_pending`, `_settle`)."""
        if self._shortcut_connect(ip, port):   # (shortcuts.py)
            return
        rt = self._rt
        buffers = rt.buffers(self._mode)
        if self._n is not None:   # a bound socket's skeleton connects
            request = connect_request(self._id, self._sk, None, ip, port, buffers,
                                      self._timeout or None, None, rt.inbox.address)
        else:
            src, self._n = (rt.loopback, rt.nic()[1]) if ip == rt.loopback else rt.nic()
            request = connect_request(self._id, 0, src, ip, port, buffers,
                                      self._timeout or None,
                                      self._opt_list() if self._opts else None,
                                      rt.inbox.address)
        self._connected = None

        def build() -> None:   # the stub's half of the path, made while the nComponent
            self._path = NicPath(self, self._mode, buffers=buffers)   # connects; there
        #                          before any push for it is read (the pushes may come
        #                          before connect() returns); not made if the request
        #                          never went out
        try:
            answer = unpack_connected(rt.call_overlapped(self._n, Op.N_CONNECT, request,
                                                         build))
        except OSError as exc:
            answer = {"errno": exc.errno or errno.EIO}
        path = self._path
        if answer.get("pending"):
            self._sk = answer["sk"]   # the skeleton a close() while it goes on closes
            if not wait:
                self._goes_on(ip, port, path)
                return
            # The kernel's handshake goes on in the nComponent; no lock is held meanwhile.
            # A blocking socket's SO_SNDTIMEO bounds the wait, as Linux's (then
            # EINPROGRESS), and a native program's handler ends it (EINTR: without
            # SA_RESTART, or any with SO_SNDTIMEO); a Python program's handler may raise.
            # Whatever ends it, the handshake goes on, as a non-blocking connect's.
            bound = self._timeout is None and self._opts.get(SNDTIMEO) is not None
            try:
                with preloaded.interruptible():
                    deadline = self._deadline(SNDTIMEO) if bound else \
                        time.monotonic() + (self._timeout or CONNECT_TIMEOUT_S) + 5.0
                    ended = self._rt.wait(self._connect_ended, deadline, self._park_connect)
            except BaseException:
                self._goes_on(ip, port, path)
                raise
            if not ended:
                if bound:
                    self._goes_on(ip, port, path)
                    raise BlockingIOError(errno.EINPROGRESS, os.strerror(errno.EINPROGRESS))
                self._failed_connect()
                raise TimeoutError("timed out")
            answer = self._connect_answer()
        self._connect_done(answer, ip, port, path)

    def _goes_on(self, ip: str, port: int, path: NicPath) -> None:
        """A handshake not done when connect() returns (non-blocking, or its wait ended
        first): SO_ERROR, poll()'s writability or the next connect() say how it went
        (one that ended meanwhile, in an error, rings at once)."""
        self._started = True
        with self._lock:
            self._pending = (ip, port, path)
            if self._connect_ended():   # meanwhile (its push found no _pending): a failure
                if self._connected is None or "errno" in self._connected:   # is readable
                    self._ring()                                            # too
            elif self._rt.exact:
                self._sync_writable()   # not writable while it goes on

    def _connect_answer(self) -> dict[str, Any]:
        if self._connected is None:   # its nComponent died meanwhile
            code, self._error = self._error, 0
            self._connected = {"errno": code}
        return self._connected

    def _connect_done(self, answer: dict[str, Any], ip: str, port: int, path: NicPath) -> None:
        if "errno" in answer:
            self._failed_connect()
            if answer["errno"] == errno.ETIMEDOUT and self._timeout:
                raise TimeoutError("timed out")
            raise err(answer["errno"])
        path.n, path.sk = self._n, answer["sk"]
        self._sk = answer["sk"]
        self._local = self._to_program(answer["local"])
        self._peer = self._to_program((ip, port))
        if LINGER in self._opts:   # (sockopts.py)
            self._send_linger(quiet=True)

    def _settle(self) -> None:
        """A non-blocking connect whose handshake was pending: done, if it has ended."""
        with self._lock:
            if self._pending is None or not self._connect_ended():
                return
            (ip, port, path), self._pending = self._pending, None
        try:
            self._connect_done(self._connect_answer(), ip, port, path)
        except OSError as exc:
            with self._lock:
                self._error = exc.errno or errno.EIO
                self._ring()

    def _await_connect(self, nonblocking: bool, again: bool = False) -> None:
        """A send or recv on a socket whose non-blocking connect is pending: EAGAIN if
        the handshake goes on (non-blocking), else its end is waited for; then the
        socket is connected, or broken with the connect's error. again: for a blocking
        connect() (_connect_again), whose wait SO_SNDTIMEO bounds (then it returns,
        the handshake pending) and a native program's signal ends (EINTR), as Linux's."""
        self._rt.pump()
        if not self._connect_ended():
            if nonblocking:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            with preloaded.interruptible() if again else contextlib.nullcontext():
                deadline = self._deadline(SNDTIMEO if again else None) or \
                    time.monotonic() + CONNECT_TIMEOUT_S + 5.0
                ended = self._rt.wait(self._connect_ended, deadline, self._park_connect)
            if not ended:
                if again and self._opts.get(SNDTIMEO) is not None:
                    return   # EALREADY (_connect_again), as Linux's after SO_SNDTIMEO
                raise TimeoutError("timed out")
        self._settle()

    def _connect_again(self) -> None:
        """connect() after a non-blocking one began, as Linux answers it: EALREADY while
        the handshake goes on, then once 0 or its error (ECONNABORTED if SO_ERROR took
        the error already), and after that EISCONN, or a new attempt after a failure."""
        if self._pending is not None and self._timeout is None:   # blocking now: Linux
            self._await_connect(False, again=True)                 # waits for the end
        self._rt.pump()   # what the skeleton said so far
        self._settle()
        if self._pending is not None:
            raise err(errno.EALREADY)
        self._started = False
        if self._peer is not None:
            return
        with self._lock:
            code, self._error, self._broken = self._error, 0, False
            self._hush()
        raise err(code or errno.ECONNABORTED)

    def _connect_ended(self) -> bool:
        return self._connected is not None or bool(self._error)

    def _park_connect(self, timeout: float | None) -> None:
        with self._cond:
            self._cond.wait_for(self._connect_ended, timeout)

    def _failed_connect(self) -> None:
        with self._lock:
            if self._path is not None:
                self._path.release()
            self._path = None
        self._n, self._sk = None, 0   # the skeleton is gone with the failed connect

    def connect_ex(self, address: Any) -> int:
        try:
            self.connect(address)
        except TimeoutError as exc:   # a timeout's (EAGAIN, as CPython's), or the kernel's
            return exc.errno or errno.EAGAIN
        except OSError as exc:
            return exc.errno or errno.EIO
        return 0
