"""Rack sockets across fork(): a child's inherited descriptors reach its parent's stubs.

On Linux a fork()ed child shares its parent's sockets: either may send,
receive or accept on them, and a connection closes when its last descriptor
in any process closes (a forking server's parent closes its copy, the child
talks on it). A bsdSocketStub's state lives in its process, so here:

- at the fork, in the parent (`before_fork`), if it has rack sockets: one more
  handle (handles.py) of every descriptor the child inherits, so a connection
  stays open while the child holds it, and a channel to the child (a Unix
  socketpair). After it (`after_fork_in_parent`) a thread of the parent serves
  the child's calls on those handles, one at a time, until the child ends (the
  channel's EOF, or its pidfd: a process it started may hold the channel too),
  then closes what the child still held; the parent's runtime
  is threaded from then on, so the bells (the very descriptors the child
  inherited) tell the child's select and poll the truth;
- in the child (`after_fork_in_child`, from runtime.py), every handle becomes a
  `Forked` one: each socket call goes to the parent, is made there on the
  child's handle, and its result or OSError comes back. A call that makes a
  descriptor (accept, dup) brings it along (SCM_RIGHTS). Buffers are filled in
  the child from the bytes the parent read;
- the sockets a child makes are its own, not its parent's: its own runtime's
  (runtime.py), at full speed, and a grandchild shares them through the child as
  above;
- exec(): the child's end of the channel outlives it, named by CHANNEL_ENV
  ("fd:pid": only this process, whatever image it runs, may use it; a program
  subprocess started, spawning.py, claims "fd:^spawner" as its own). The
  native interposer of the image the child exec()s (native/preload.c) marks
  the socket descriptors it inherited, and on the first call on one asks its
  parent which are rack sockets (`inherit`: by inode, the twins' own): those
  become Forked handles again (an inetd-style server's dup2(conn, 0), then
  exec). Those close-on-exec (every rack descriptor, unless dup2()ed) are
  closed by the kernel; their twins then (or at the image's end, if it never
  touches a socket);
- what a child cannot do yet with the sockets it inherited: have two threads in
  calls on them at once (they take turns), pass them on to a grandchild
  (EOPNOTSUPP there; the parent's twins of other children's handles are not
  inherited), or outlive its parent with them (the parent's exit closes its
  connections: ECONNRESET); nor can it use its parent's rack memory (vm.py).

This file is the fork hooks and the child's side (the `Forked` handle,
`inherit`, `handle_over`); the parent's side, the twins and the thread that
serves the child's calls on them, is fork_server.py; the channel's messages
(and INHERIT, the token of `inherit`) are fork_channel.py's.
"""

import _socket
import errno
import gc
import os
import socket as _socket_module
import stat
import sys
import threading
from typing import Any

from splitrack.guest import handles, own_fds
from splitrack.guest.fork_channel import INHERIT, receive_message, send_message
from splitrack.guest.fork_server import TWINS, serve_child, twin_of
from splitrack.guest.sockargs import bytes_view, err, scatter

_std = _socket_module.socket
_pending: tuple[tuple[Any, Any], dict[int, Any]] | None = None   # between the fork hooks
_channel: Any = None            # the child's end, once forked
_turn = threading.Lock()        # the child's calls take turns on it
_TOKENS: dict[int, int] = {}    # a child's descriptor -> its handle at the parent, if not its own
_OWNED: dict[int, int] = {}     # a child's Forked descriptor -> the pid whose channel serves it
_INHERITED: dict[int, int] = {}  # the child's: an inherited socket's state (id) -> a token
_owner = 0                      # the child's pid: a grandchild may not use the channel
CHANNEL_ENV = "SPLITRACK_FORK_CHANNEL"   # "fd:pid": the channel, for what the child exec()s
SPAWN_TOKEN = b"T"   # a spawned program's token pipe holds it until a process claims it


# ---- the parent (its thread that serves the child: fork_server.py) -------------------------
def before_fork(rt: Any) -> None:
    """(the parent's, before a fork) The child's handles, and the channel to it."""
    global _pending
    if rt is None or rt.forked or not rt.stubs:
        return
    _pending = (_socket_module.socketpair(), twins(rt))


def twins(rt: Any, only: set[int] | None = None) -> dict[int, Any]:
    """(the parent's) A twin of each of its handles' descriptors (of those in `only`),
    by descriptor: what a child that inherits them holds here."""
    theirs = {}
    for stub in list(rt.stubs.values()):
        for fd in handles.live_fds(stub):
            if fd != stub._fd and fd not in TWINS and (only is None or fd in only):
                theirs[fd] = twin = twin_of(stub, fd)   # (not another child's)
                TWINS[_std.fileno(twin)] = twin
    return theirs


def after_fork_in_parent(rt: Any) -> None:
    global _pending
    if _pending is None:
        return
    (mine, child), theirs = _pending
    _pending = None
    child.close()
    serve(rt, mine, theirs)


def serve(rt: Any, channel: Any, theirs: dict[int, Any], pidfd: int = -1) -> None:
    """(the parent's) A thread serves the child's calls on `theirs` from now on (pidfd:
    the child's, if known; else it says its pid first)."""
    threading.Thread(target=serve_child, args=(rt, channel, theirs, pidfd),
                     name="splitrack-forked-child", daemon=True).start()


# ---- the child ----------------------------------------------------------------------------
def after_fork_in_child() -> None:
    """(the child's, from runtime.py) Its handles become Forked ones, over the channel."""
    global _pending, _channel, _owner
    if _pending is None:
        return
    (parents, mine), _ = _pending
    _pending = None
    parents.close()
    for handle in TWINS.values():   # the parent's (this child's, other children's): only
        handle._gone = True          # their descriptors were copied
        os.close(_std.detach(handle))
    TWINS.clear()
    _channel, _owner = mine, os.getpid()
    send_message(mine, (_owner, "pid"), [])
    os.set_inheritable(mine.fileno(), True)   # (for an image it exec()s)
    os.environ[CHANNEL_ENV] = f"{mine.fileno()}:{_owner}"
    stream, dgram = _forked_class(False), _forked_class(True)
    stub_class, dgram_class = stream.__bases__[1], dgram.__bases__[1]   # (Forked, X)
    for obj in gc.get_objects():   # every handle the program holds (the state is shared)
        kinds = type(obj).__mro__   # (not isinstance: the stub's says yes to any socket)
        if stub_class in kinds and Forked not in kinds and not obj._gone \
                and _std.fileno(obj) >= 0:   # (a Forked one is its grandparent's: not ours)
            obj.__class__ = dgram if dgram_class in kinds else stream
            fd = _std.fileno(obj)
            _INHERITED[id(obj.__dict__)], _OWNED[fd] = fd, _owner


def inherited(fd: int) -> bool:
    """(the child's) Descriptor fd is a handle of a rack socket its parent serves."""
    return fd in _OWNED


def for_me(env: str) -> int:
    """CHANNEL_ENV's channel, if it is this process's, else -1: "fd:pid" (a fork()ed
    child: this pid's), or "fd:^spawner" (a channel spawning.py made, which the first
    process of the program spawned to ask for it claims: the program itself, or one
    it started, as a shell does the program of its command line; then ":token:",
    the pipe whose one byte the claim takes, and ",dev.ino,...,", the inodes of the
    rack sockets it was given). A claim names this pid in CHANNEL_ENV, for the
    images it exec()s."""
    channel, _, pid = env.partition(":")
    if not channel.isdigit():
        return -1
    fd = int(channel)
    if pid == str(os.getpid()):
        return fd
    spawner, _, token = pid[1:].partition(":")
    if not pid.startswith("^") or not _claim(fd, spawner, token.partition(":")[0]):
        return -1
    os.environ[CHANNEL_ENV] = f"{fd}:{os.getpid()}"
    return fd


def _claim(fd: int, spawner: str, token: str) -> bool:
    """Channel fd is the spawner's (the kernel says who made the pair), and this process
    is the first to take the one byte of the token pipe (spawning.py), which is not
    the channel: a process that comes second takes nothing of the channel's."""
    try:
        channel = _std(fileno=fd)
    except OSError:
        return False
    try:
        cred = channel.getsockopt(_socket_module.SOL_SOCKET, _socket_module.SO_PEERCRED, 12)
        if str(int.from_bytes(cred[:4], sys.byteorder)) != spawner or not token.isdigit() \
                or not stat.S_ISFIFO(os.fstat(int(token)).st_mode):
            return False
        if os.read(int(token), 1) != SPAWN_TOKEN:   # (its other end closed: b"" after)
            return False
        os.close(int(token))
        return True
    except OSError:
        return False
    finally:
        channel.detach()


def inherit(fds: list[int]) -> dict[int, Any]:
    """(an image a fork()ed child exec()ed, from the interposer) Which of these socket
    descriptors it inherited are its parent's rack sockets: a Forked handle of each
    ({} if it has no channel: it is no such image)."""
    global _channel, _owner
    env = os.environ.get(CHANNEL_ENV, "")
    channel = for_me(env)
    if channel < 0 and ":^" in env:   # (the interposer says so, and leaves them the kernel's)
        raise OSError(errno.EBUSY, "another process of the program subprocess started has "
                      "them")
    if channel < 0:
        return {}
    _channel, _owner = _std(fileno=channel), os.getpid()
    inodes = [(fd, handles.inode(fd)) for fd in fds if fd != channel]
    (got, _) = _ask(INHERIT, "inherit", ([(fd, ino) for fd, ino in inodes if ino],))
    return {fd: _handle_over(fd, key, dgram) for fd, (key, dgram) in got.items()}


def _call(handle: Any, method: str, *args: Any) -> tuple[Any, list[int]]:
    """A call made at the parent on this handle's twin: (its result, descriptors)."""
    fd = _std.fileno(handle)
    if fd < 0:
        raise err(errno.EBADF)
    if _OWNED.get(fd) != os.getpid():   # a grandchild's: the parent's twin is not its
        raise OSError(errno.EOPNOTSUPP, "a rack socket passes one fork() only")
    return _ask(_TOKENS.get(fd, fd), method, args)


def _ask(token: int, method: str, args: tuple) -> tuple[Any, list[int]]:
    if os.getpid() != _owner:   # a grandchild: the channel is its parent's
        raise OSError(errno.EOPNOTSUPP, "a rack socket passes one fork() only")
    with _turn:
        try:
            send_message(_channel, (token, method, args), [])
            (ok, result), fds = receive_message(_channel)
        except (EOFError, OSError):
            raise OSError(errno.ECONNRESET, "the parent that held this socket has ended"
                          ) from None
        except BaseException:   # (Ctrl-C meanwhile: the reply would come to the next call,
            _channel.shutdown(_socket_module.SHUT_RDWR)   # so there is none: ECONNRESET)
            raise
    if not ok:
        raise result
    return result, fds


def _forward(method: str) -> Any:
    def call(self: Any, *args: Any) -> Any:
        return _call(self, method, *args)[0]
    call.__name__ = method
    return call


class Forked:
    """A fork()ed child's handle: its calls are made at the parent (module docstring)."""

    __slots__ = ()

    def fileno(self) -> int:
        return _std.fileno(self)   # the inherited descriptor: the parent rings its bell

    def quick_path(self) -> None:
        return None   # its recvs are the parent's (stub.py: never in C here)

    def send(self, data: Any, flags: int = 0) -> int:
        return _call(self, "send", bytes(bytes_view(data)), flags)[0]

    def sendall(self, data: Any, flags: int = 0) -> None:
        _call(self, "sendall", bytes(bytes_view(data)), flags)

    def sendto(self, data: Any, flags_or_address: Any, address: Any = None) -> int:
        args = (flags_or_address,) if address is None else (flags_or_address, address)
        return _call(self, "sendto", bytes(bytes_view(data)), *args)[0]

    def sendmsg(self, buffers: Any, ancdata: Any = (), flags: int = 0,
                address: Any = None) -> int:
        if ancdata:
            raise err(errno.EOPNOTSUPP)
        data = b"".join(bytes(bytes_view(b)) for b in buffers)
        return self.send(data, flags) if address is None else self.sendto(data, flags, address)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        data = self.recv(nbytes or len(view), flags)
        view[:len(data)] = data
        return len(data)

    def recvfrom_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> tuple[int, Any]:
        view = memoryview(buffer).cast("B")
        data, address = self.recvfrom(nbytes or len(view), flags)
        view[:len(data)] = data
        return len(data), address

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0) -> tuple:
        data, address = self.recvfrom(bufsize, flags)
        return data, [], 0, address

    def recvmsg_into(self, buffers: Any, ancbufsize: int = 0, flags: int = 0) -> tuple:
        buffers = list(buffers)
        data, address = self.recvfrom(sum(memoryview(b).nbytes for b in buffers), flags)
        return scatter(data, buffers), [], 0, address

    def accept(self) -> tuple[Any, Any]:
        (key, dgram, address), fds = _call(self, "accept")
        return _handle_over(_lowest(fds[0]), key, dgram), address

    def dup(self) -> Any:
        (key, dgram), fds = _call(self, "dup")
        return _handle_over(_lowest(fds[0]), key, dgram)

    def dup_onto(self, fd: int) -> Any:
        """One more handle, over descriptor fd (a dup the kernel made: the interposer's,
        close-on-exec or not as it made it)."""
        (key, dgram), fds = _call(self, "dup")
        os.dup2(fds[0], fd, inheritable=os.get_inheritable(fd))
        os.close(fds[0])
        return _handle_over(fd, key, dgram)

    def _real_close(self, _ss: Any = _std) -> None:
        fd = _std.fileno(self)
        if fd < 0 or self._gone:
            return
        copy = _untracked_copy(fd)
        if copy is not None:   # an os.dup2() copy no handle holds: the copy keeps
            _TOKENS[copy], _OWNED[copy] = _TOKENS.get(fd, fd), _OWNED.get(fd, 0)   # it open
        else:
            try:
                _call(self, "close")
            except OSError:
                pass   # the parent has ended: its handles are closed already
        self._gone = True
        _TOKENS.pop(fd, None)
        _OWNED.pop(fd, None)
        _socket.socket.close(self)

    def __del__(self) -> None:
        _socket.socket.close(self)   # (the parent closes its twin at the child's end)


for _name in ("connect", "connect_ex", "bind", "listen", "shutdown", "setsockopt",
              "getsockopt", "getsockname", "getpeername", "settimeout", "gettimeout",
              "setblocking", "getblocking", "recv", "recvfrom", "set_rack_mode", "fionread"):
    setattr(Forked, _name, _forward(_name))   # made at the parent as they are


def _untracked_copy(fd: int) -> int | None:
    """Another descriptor of this process of fd's connection that no handle holds (an
    os.dup2() copy, onto stdin for an exec(), say), if there is one."""
    key = handles.inode(fd)
    for name in os.listdir("/proc/self/fd"):
        other = int(name)
        if other != fd and other not in _OWNED and handles.inode(other) == key:
            return other
    return None


def _lowest(fd: int) -> int:
    """A descriptor the parent sent for the program (accept's, dup's) renumbered where
    Linux numbers a new one, the lowest free: a native program's interposer moved it
    past the program's, as it moves what the rack's own code receives
    (native/preload_fd.c: rack_own), and a socket's dup stays low."""
    low = os.dup(fd)
    if low > fd:   # (not moved: a Python program's)
        os.close(low)
        return fd
    os.set_inheritable(low, os.get_inheritable(fd))
    os.close(fd)
    return low


def _handle_over(fd: int, key: int, dgram: bool) -> Any:
    """A Forked handle over descriptor fd, whose twin at the parent is `key`."""
    handle = _std.__new__(_forked_class(dgram))
    _std.__init__(handle, _socket_module.AF_UNIX, _socket_module.SOCK_STREAM, 0, fd)
    handle._gone, handle._timeout = False, None
    _TOKENS[fd], _OWNED[fd] = key, os.getpid()
    own_fds.note(handle, fd)
    return handle


def handle_over(handle: Any, fd: int, state: dict[str, Any], dgram: bool) -> None:
    """(the child's) socket(fileno=fd) of a descriptor of an inherited socket (state):
    `handle`, a stub not yet made, becomes a Forked handle over fd, whose calls are
    made at the parent on the twin of an inherited handle of that socket."""
    token = _INHERITED.get(id(state))
    if token is None or _OWNED.get(token) != os.getpid():
        raise err(errno.EBADF)   # (its handles were closed here, or are a grandparent's)
    (key, _), twin = _ask(_TOKENS.get(token, token), "dup", ())   # a handle of its own
    os.close(twin[0])   # (the parent's new handle: fd is already a descriptor of it)
    handle.__class__ = _forked_class(dgram)
    _std.__init__(handle, _socket_module.AF_UNIX, _socket_module.SOCK_STREAM, 0, fd)
    handle._gone, handle._timeout = False, None
    _TOKENS[fd], _OWNED[fd] = key, os.getpid()
    own_fds.note(handle, fd)


_CLASSES: dict[bool, type] = {}


def _forked_class(dgram: bool) -> type:
    """Forked over the stream stub's class, or the datagram one's (same layout, so a
    handle's class may change to it)."""
    if not _CLASSES:   # (imported here: they import the runtime, which imports this)
        from splitrack.guest.datagram import DatagramStub
        from splitrack.guest.stub import BsdSocketStub
        _CLASSES[False] = type("ForkedStream", (Forked, BsdSocketStub), {"__slots__": ()})
        _CLASSES[True] = type("ForkedDatagram", (Forked, DatagramStub), {"__slots__": ()})
    return _CLASSES[dgram]
