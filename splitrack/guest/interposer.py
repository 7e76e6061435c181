"""The Python half of the native interposer: a native program's rack socket calls.

`splitrack run` starts a dynamically linked program with native/preload.c
preloaded (LD_PRELOAD). That interposer catches libc's socket calls; for a TCP
or UDP socket over IPv4 (and on descriptors it made so) it calls the
functions of native/guest.h, which cffi's embedding API (module
native._guest) runs here, in an interpreter started inside the program on
its first such socket. Each is the same bsdSocketStub a Python program's
`socket.socket` makes (stub.py, datagram.py): one stub implementation.

Contract (native/guest.h): each function takes libc's arguments in C types
and returns what libc returns, or -errno. An exception that is not an
OSError is a bug here: it is printed, and the call fails with EIO.

The program's descriptor is the stub handle's own (handles.py), which the
runtime neither reads nor writes, so the interposer may send every call on it
here. Its readiness is exact once the runtime is polled (runtime.py), which
`watch` makes it the first time the program polls, selects or uses epoll on a
rack socket (the interposer sees those calls, and passes them on to the
kernel); from then on those waits read the runtime's inbox themselves
(`wait_begin`, `wait_end`: inbox_reader.py), without a thread hop a message.
A program that only blocks in its calls keeps the inline runtime. Handles are
kept in `_HANDLES`, by descriptor, until the program closes them. Once a
stream's stub has served a recv, its descriptor's recvs of bytes already
there are taken in C (`_QUICK`, native/fastrecv.h), never reaching `_recv`.

In a Python program (which has the drop-in) the same functions run in its own
interpreter, for the TCP and UDP sockets libc makes there (uvloop's libuv,
python -I), and for a stub descriptor `detach()` hands out (`hand_over`: C code
may take it), which the interposer then treats as it treats its own.
Descriptors are close-on-exec, so an image a program exec()s has none of its
stubs; but in an image a fork()ed child exec()s, the rack sockets it kept open
(dup2()ed onto its stdin, say) are its parent's again (`inherit`: forked.py).
"""

import _socket
import errno
import math
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

from native import stubpath
from native.fitring import Interrupted
from splitrack.guest import forked, own_fds, preloaded
from splitrack.guest.runtime import current, runtime
from splitrack.guest.stub import BsdSocketStub

_HANDLES: dict[int, Any] = {}   # the program's descriptor -> its stub handle
_QUICK: dict[int, Any] = {}     # ... -> its NicPath, while fr_recv may take from it
                                # (None: the stub's, as its first recv found: a
                                # datagram's, a shortcut's, a broken one's)
_fr_taken = stubpath.lib.fr_taken
os.register_at_fork(after_in_child=_QUICK.clear)   # (a child's sockets are its parent's)
_FR_RECV = int(stubpath.ffi.cast("uintptr_t", stubpath.ffi.addressof(stubpath.lib, "fr_recv")))
_SOCK_NONBLOCK = int(socket.SOCK_NONBLOCK)
_DONTWAIT = int(socket.MSG_DONTWAIT)   # (a plain int: an IntFlag's | is Python calls)
_STRUCTS = {(socket.SOL_SOCKET, socket.SO_LINGER), (socket.SOL_SOCKET, socket.SO_RCVTIMEO),
            (socket.SOL_SOCKET, socket.SO_SNDTIMEO), (socket.IPPROTO_TCP, socket.TCP_INFO),
            (socket.IPPROTO_TCP, socket.TCP_CONGESTION)}   # options that are not an int


def bind(ffi: Any) -> None:
    """Make this module's functions native._guest's (its embedding init code)."""
    def extern(fn: Callable[..., int]) -> None:
        ffi.def_extern(name=f"sr_{fn.__name__.lstrip('_')}", error=-errno.EIO,
                       onerror=_bug)(_errno(fn))

    def _socket(domain: int, kind: int, protocol: int) -> int:
        return _adopt(BsdSocketStub(domain, kind, protocol))

    def _bind(fd: int, ip: int, port: int) -> int:
        _handle(fd).bind((_dotted(ip), port))
        return 0

    def _connect(fd: int, ip: int, port: int) -> int:
        code = _handle(fd).connect_ex((_dotted(ip), port))
        return -code if code else 0

    def _listen(fd: int, backlog: int) -> int:
        _handle(fd).listen(backlog)
        return 0

    def _accept(fd: int, flags: int, ip: Any, port: Any) -> int:
        conn, peer = _handle(fd).accept()
        if flags & _SOCK_NONBLOCK:
            conn.setblocking(False)
        _address(peer, ip, port)
        return _adopt(conn)

    def _send(fd: int, buf: Any, n: int, flags: int, to: int, ip: int, port: int) -> int:
        sock, data = _handle(fd), ffi.buffer(buf, n)
        flags = _own_flags(fd, sock, flags)
        if to > 0:
            return sock.sendto(data, flags, (_dotted(ip), port))
        if to < 0 and sock.type == socket.SOCK_DGRAM:
            raise OSError(-to, os.strerror(-to))
        return sock.send(data, flags)   # (a stream's sendto ignores its address)

    def _recv(fd: int, buf: Any, n: int, flags: int, ip: Any, port: Any) -> int:
        sock = _handle(fd)
        flags = _own_flags(fd, sock, flags)
        if ip == ffi.NULL:
            got = sock.recv_into(ffi.buffer(buf, n), n, flags)
            if fd not in _QUICK and fd in _HANDLES:   # its next recvs of bytes already
                _quick(fd, sock)                       # there: in C
            return got
        got, sender = sock.recvfrom_into(ffi.buffer(buf, n), n, flags)
        _address(sender, ip, port)
        return got

    def _shutdown(fd: int, how: int) -> int:
        _handle(fd).shutdown(how)
        return 0

    def _close(fd: int) -> int:
        handle = _HANDLES.pop(fd, None)   # (an interposed descriptor's: a Python program's
        if handle is None:                # own handles close themselves)
            raise OSError(errno.EBADF, "not a rack socket's descriptor")
        _unquick(fd)
        handle.close()
        return 0

    def _name(fd: int, peer: int, ip: Any, port: Any) -> int:
        sock = _handle(fd)
        _address(sock.getpeername() if peer else sock.getsockname(), ip, port)
        return 0

    def _setsockopt(fd: int, level: int, name: int, value: Any, n: int) -> int:
        raw = bytes(ffi.buffer(value, n))
        _handle(fd).setsockopt(level, name,
                                int.from_bytes(raw, sys.byteorder, signed=True) if n == 4
                                else raw)
        return 0

    def _getsockopt(fd: int, level: int, name: int, value: Any, n: Any) -> int:
        sock, room = _handle(fd), n[0]
        if (level, name) in _STRUCTS or room < 4:
            raw = sock.getsockopt(level, name, room)
        else:
            raw = int(sock.getsockopt(level, name)).to_bytes(4, sys.byteorder, signed=True)
        raw = raw[:room]
        ffi.memmove(value, raw, len(raw))
        n[0] = len(raw)
        return 0

    def _blocking(fd: int, blocking: int) -> int:
        sock = _handle(fd)
        if blocking < 0:
            return int(sock.gettimeout() != 0.0)
        sock.setblocking(bool(blocking))
        return 0

    def _fionread(fd: int) -> int:
        return min(_handle(fd).fionread(), 0x7FFFFFFF)

    def _dup(fd: int, newfd: int) -> int:
        onto = getattr(_handle(fd), "dup_onto", None)   # a fork()ed child's (forked.py)
        _unquick(newfd)   # (closed behind the interposer's back: fclose, close_range)
        _HANDLES[newfd] = onto(newfd) if onto else BsdSocketStub(fileno=newfd)   # one more
        return 0

    def _exit() -> int:
        for fd in list(_HANDLES):
            _unquick(fd)
            try:
                _HANDLES.pop(fd).close()
            except OSError:
                pass
        return 0

    def _watch(polled: int) -> int:
        rt = runtime()
        if polled:
            rt.go_polled()
        else:
            rt.go_threaded()
        return int(not rt.threaded)

    def _wait_begin(arm: int, fds: Any, room: int, most_ms: Any) -> int:
        rt = current()
        if rt is None:   # (a fork()ed child that has made no socket of its own)
            most_ms[0] = -1
            return -errno.ENOENT
        if rt.threaded:
            return -errno.ENOTSUP
        if arm and rt.wait_sources() > room:
            most_ms[0] = rt.wait_sources()
            return -errno.ENOSPC
        if _QUICK and _fr_taken():   # what C's recvs read goes back to the skeletons
            for path in tuple(_QUICK.values()):   # (other threads change _QUICK)
                if path is not None:
                    path.credit_after_quick()
        sources, most = rt.poll_begin(bool(arm))
        most_ms[0] = math.ceil(most * 1000)
        if sources is None:
            return -errno.EAGAIN
        for i, fd in enumerate(sources):
            fds[i] = fd
        return len(sources)

    def _wait_end() -> int:
        return int(current().poll_end())

    def _ready() -> int:
        return 1

    @ffi.def_extern(name="sr_fast_recv", onerror=_bug)   # (a pointer: NULL if it failed)
    def _fast_recv() -> Any:
        return ffi.cast("void *", _FR_RECV)

    def _memory() -> int:
        from splitrack.guest import rackmem
        try:
            rackmem.install()
        except OSError as exc:
            sys.stderr.write(f"splitrack: --memory rack: {exc.strerror or exc}\n")
            return -(exc.errno or errno.EIO)
        return 0

    def _inherit(fds: Any, n: int, rack: Any) -> int:
        got = forked.inherit([fds[i] for i in range(n)])
        _HANDLES.update(got)
        for i in range(n):
            rack[i] = int(fds[i] in got)
        return 0

    for fn in (_ready, _memory, _watch, _wait_begin, _wait_end, _socket, _bind, _connect,
               _listen, _accept, _send, _recv, _shutdown, _close, _name, _setsockopt,
               _getsockopt, _blocking, _fionread, _dup, _exit, _inherit):
        extern(fn)


def _quick(fd: int, sock: Any) -> None:
    """fd's recvs of bytes already there are taken in C from now on, if its stub's
    are plain stream bytes through an nComponent (native/fastrecv.h)."""
    path = sock.quick_path()   # (a fork()ed child's handle: None, forked.py)
    if path is not None and stubpath.lib.fr_on(fd, path.c) != 0:
        path = None   # (a descriptor past the table's end)
    _QUICK[fd] = path   # (kept: the C state lives as long as the table names it)


def _unquick(fd: int) -> None:
    """fd's recvs are the stub's again: its descriptor closed, or is another's now."""
    if _QUICK.get(fd) is not None:
        stubpath.lib.fr_off(fd)   # (once it returns, no recv in C uses the path)
    _QUICK.pop(fd, None)


def hand_over(fd: int) -> None:
    """(a Python program's) A stub's descriptor detach() handed out: C code may take it
    (uvloop's create_server gives its listener's to libuv so), so under the native
    interposer it is interposed from now on, over a handle of its own here, as
    socket(fileno=fd) would make. Without the interposer, nothing."""
    interpose = preloaded.call("sr_interpose")
    if interpose is not None and fd not in _HANDLES:   # (again: uvloop's server.sockets
        _HANDLES[fd] = BsdSocketStub(fileno=fd)        # makes and detaches one more)
        interpose(fd)


def _handle(fd: int) -> Any:
    handle = _HANDLES.get(fd)
    if handle is None:
        handle = own_fds.handle(fd)   # a Python program's socket object's
    if handle is None:
        raise OSError(errno.EBADF, "not a rack socket's descriptor")   # (closed meanwhile)
    return handle


def _own_flags(fd: int, handle: Any, flags: int) -> int:
    """A call on a Python program's socket object's descriptor (own_fds.py) waits only
    if the object has no timeout: CPython makes the descriptor non-blocking otherwise."""
    if fd not in _HANDLES and handle.gettimeout() is not None:
        return flags | _DONTWAIT
    return flags


def _adopt(handle: Any) -> int:
    """The program's descriptor of a new handle: its own (not the runtime's)."""
    fd = _socket.socket.fileno(handle)
    _unquick(fd)   # (closed behind the interposer's back: fclose, close_range)
    _HANDLES[fd] = handle
    return fd


def _dotted(ip: int) -> str:
    return socket.inet_ntoa(ip.to_bytes(4, "big"))


def _address(address: Any, ip: Any, port: Any) -> None:
    """An address out; None (a stream's recvfrom: no sender) is port -1."""
    if address is None:
        ip[0], port[0] = 0, -1
        return
    ip[0] = int.from_bytes(socket.inet_aton(address[0]), "big")
    port[0] = address[1]


def _errno(fn: Callable[..., int]) -> Callable[..., int]:
    def call(*args: Any) -> int:
        try:
            return fn(*args)
        except KeyboardInterrupt:   # a Python program's Ctrl-C in a wait: EINTR, and the
            return -errno.EINTR     # interposer trips SIGINT again (native/preload.h: ret)
        except Interrupted:         # a native program's handler without SA_RESTART ran in
            return -errno.EINTR     # a wait: EINTR, as Linux's call would return
        except BlockingIOError:
            return -errno.EAGAIN
        except TimeoutError as exc:   # the rack's (FitTimeout), or a wait's that timed out
            return -(exc.errno or errno.ETIMEDOUT) if type(exc) is not TimeoutError \
                else -errno.EAGAIN
        except OSError as exc:
            return -(exc.errno or errno.EIO)
        except (TypeError, ValueError, OverflowError):
            return -errno.EINVAL
    call.__name__ = fn.__name__
    return call


def _bug(exc_type: type, value: BaseException, tb: Any) -> None:
    traceback.print_exception(exc_type, value, tb)
    return None


__all__ = ["bind"]
