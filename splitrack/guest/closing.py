"""shutdown() and close() of a bsdSocketStub: the connection's end.

`Closing` is the part of BsdSocketStub (stub.py) that ends things; its state is
the stub's. A connection has one or more handles (handles.py: dup, fromfd,
socket(fileno=)); closing a handle closes its descriptor, and the last one's
close ends the connection: held sends go first, then N_CLOSE to the skeleton
(a call, so every byte sent before it arrives first; with unread bytes Linux
resets the connection, and so does the skeleton), and the shortcut
connections no accept() took see EOF. A handle dropped without close() is
counted gone at the next handle change (__del__ takes no lock). detach() hands
the descriptor out, for socket(fileno=) or C code under the native interposer
(interposer.py). shutdown() is Linux's: SHUT_RD, SHUT_WR or both, ENOTCONN on
a socket never connected, EINVAL for any other `how`.
"""

import _socket
import errno
import operator
import socket as _socket_module
from typing import Any

from fit_rpc import Op
from fit_rpc.netpath import CLOSE_UNREAD, SK, SK_ERR
from splitrack.guest import handles
from splitrack.guest.sockargs import err

_std = _socket_module.socket          # the stdlib class, whatever is installed later


class Closing:
    """BsdSocketStub's shutdown, close and detach."""

    __slots__ = ()   # (its state is the stub's)

    def shutdown(self, how: int) -> None:
        self._alive()
        if operator.index(how) not in (0, 1, 2):
            raise err(errno.EINVAL)
        if self._peer is None and not self._listening:
            raise err(errno.ENOTCONN)
        with self._lock:
            if how in (_socket_module.SHUT_RD, _socket_module.SHUT_RDWR):
                self._shut_rd = True
                self._ring()
            if how in (_socket_module.SHUT_WR, _socket_module.SHUT_RDWR):
                self._shut_wr = True
                self._wake_senders()
            if self._path is not None and self._n is None:   # a shortcut: no skeleton
                self._path.shutdown(how)
                return
            if self._path is not None:
                self._path.announce_held()   # held sends come before the shutdown
        self._rt.call_raw(self._n, Op.N_SHUTDOWN, SK_ERR.pack(self._sk, how))

    def _real_close(self, _ss: Any = _std) -> None:
        last = handles.release(self, _std.fileno(self))
        if last is None:
            return   # closed already, or detached
        if last:   # else another handle is open: only this one's descriptor closes
            self._close_connection()
        super()._real_close()

    def _close_connection(self) -> None:
        """The connection's end, whatever handles are open (the last one closed, or the
        process exits: runtime.close)."""
        if self._rt.forked:   # a fork()ed child's copy: its descriptors, nothing more
            self._close_own()
            return
        with self._cond:
            if self._dead:
                return
            self._dead = True
            self._cond.notify_all()
            unread = False
            if self._path is not None and self._n is not None:
                self._path.announce_held()   # held sends come before the close
                # bytes it never read: Linux's close resets the connection then
                unread = not self._broken and bool(self._path.take(1, None, True))
        if self._n is not None and self._sk:
            try:   # a call: every byte sent before it reaches the skeleton first
                self._rt.call_raw(self._n, Op.N_CLOSE,
                                  SK.pack(self._sk) + (CLOSE_UNREAD if unread else b""))
            except OSError:
                pass   # the nComponent is gone: nothing left to close
        self._rt.unregister(self._id)
        with self._lock:
            if self._path is not None:
                self._path.release()
            waiting = [info["stub"] for info in self._accepts if "stub" in info]
            self._accepts.clear()
        for conn in waiting:   # shortcut connections no accept() took: their peers see EOF
            conn.close()
        self._n, self._sk = None, 0
        self._close_own()

    def _close_own(self) -> None:
        """The connection's own descriptors: the bell pair (handles.py)."""
        with self._lock:
            if self._bell is not None:
                self._bell.close()
                self._bell = None
        self._own.close()

    def __del__(self) -> None:
        """A handle dropped without close(): its descriptor closes, as a CPython socket's
        does. Nothing here takes a lock (the collector may run inside code that holds
        the stub's): the connection counts the handle gone at its next handle change,
        and closes with the last handle (handles.py)."""
        try:
            if not self._gone and _std.fileno(self) >= 0:
                self._gone = True
                handles.dropped(self, _std.fileno(self))
        except Exception:   # (half made, or the interpreter is going away)
            pass
        _socket.socket.close(self)

    def detach(self) -> int:
        """This handle's descriptor, for socket(fileno=) to take back (handles.py);
        the handle is closed, the connection is not. (dup() is CPython's: a dup of
        fileno() made into a handle by __init__.)"""
        if not handles.detach(self, _std.fileno(self)):
            return -1
        fd = _std.detach(self)
        from splitrack.guest import interposer  # (it imports this module)
        interposer.hand_over(fd)   # under the native interposer, C code may take it
        return fd
