"""The rendezvous: where two FIT endpoints of one host first meet (the shm transport).

An endpoint that serves listens on a Unix-domain SOCK_SEQPACKET socket in the
rack's run directory (`RUN_DIR/ID.fit`; the directory is its user's alone). A
peer connects and sends one hello, JSON with file descriptors attached
(SCM_RIGHTS); it gets one answer, with descriptors back:

    {"v": 1, "kind": "link", "id": CLAIM}              fds: segment, eventfd, bell page
        -> {"ok": true, "id": ID}                       fds: eventfd, bell page
    {"v": 1, "kind": "channel", "id": CLAIM, "token": T}
                                                        fds: segment, eventfd
        -> {"ok": true}                                 fds: eventfd
        -> {"errno": N, "error": TEXT}                  refused; nothing attached

The kernel vouches for who is at the other end (SO_PEERCRED: pid, uid, gid),
on both sides: the acceptor checks the connector's claim against its pid
(identity.py), the connector that the listener is the process its address
names. A link's socket stays open after the handshake: its hang-up is the
peer's end. Descriptors received are the receiver's to close.

Interface:
    Listener(path, on_hello, on_hangup, count).start()
                                          a thread: accepts, answers hellos with
                                          on_hello(sock, creds, hello, fds) ->
                                          (answer, fds, key); a key (not None) means
                                          on_hello kept the socket and watch()ed it;
                                          on_hangup(key) is called when a socket
                                          given to watch(sock, key) hangs up;
                                          count("rendezvous_refused") for a hello
                                          that is not one (or never comes); close()
    connect(path, hello, fds, timeout_s) -> (sock, creds, answer, fds)
    peer_creds(sock) -> Creds(pid, uid, gid)
"""

import json
import logging
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

HELLO_MAX_BYTES = 4096
HELLO_MAX_FDS = 4
HELLO_TIMEOUT_S = 5.0      # a connector that says nothing for this long is dropped
_CREDS = struct.Struct("3i")


class Creds(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_creds(sock: socket.socket) -> Creds:
    """Who is at the other end of a connected Unix socket, as the kernel saw it."""
    return Creds(*_CREDS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                _CREDS.size)))


def connect(path: str, hello: dict[str, Any], fds: list[int], timeout_s: float
            ) -> tuple[socket.socket, Creds, dict[str, Any], list[int]]:
    """Meet the endpoint listening at `path`: (socket, its creds, answer, its fds).
    OSError if nobody listens there or no answer comes within timeout_s."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        deadline = time.monotonic() + timeout_s
        sock.settimeout(max(0.001, timeout_s))
        while True:
            try:
                sock.connect(path)
                break
            except BlockingIOError:   # its backlog is full: it is busy, try again shortly
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path}: no room in its backlog") from None
                time.sleep(0.001)
        creds = peer_creds(sock)
        socket.send_fds(sock, [json.dumps(hello).encode()], fds)
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        data, got, _, _ = socket.recv_fds(sock, HELLO_MAX_BYTES, HELLO_MAX_FDS)
    except BaseException:
        sock.close()
        raise
    try:
        answer = json.loads(data) if data else {"errno": 104, "error": "hung up"}
        if not isinstance(answer, dict):
            raise ValueError("not an object")
    except ValueError:
        close_all(got)
        sock.close()
        raise OSError(71, f"{path}: not a FIT rendezvous") from None   # EPROTO
    sock.settimeout(None)
    return sock, creds, answer, got


OnHello = Callable[[socket.socket, Creds, dict[str, Any], list[int]],
                   tuple[dict[str, Any], list[int], Any]]


class Listener:
    """The accepting side, on a thread of its own, so that a handshake never waits
    for what the endpoint's owner is doing (two endpoints connecting to each other
    at once cannot deadlock). It also watches kept sockets for hang-ups."""

    def __init__(self, path: str, on_hello: OnHello, on_hangup: Callable[[Any], None],
                 count: Callable[[str], None]):
        self.path = path
        self._on_hello, self._on_hangup, self._count = on_hello, on_hangup, count
        if os.path.exists(path):
            os.unlink(path)   # left by a process of this id that died
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            self.sock.bind(path)
            self.sock.listen(128)
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self.sock.fileno(), select.EPOLLIN)
        self._epoll.register(self._wake, select.EPOLLIN)
        self._hellos: dict[int, tuple[socket.socket, float]] = {}   # fd -> (sock, deadline)
        self._watched: dict[int, tuple[socket.socket, Any]] = {}    # fd -> (sock, key)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"fit-rendezvous {path}",
                                        daemon=True)

    def start(self) -> "Listener":
        """Begin accepting (once the owner can take what on_hello gives it)."""
        self._thread.start()
        return self

    def watch(self, sock: socket.socket, key: Any) -> None:
        """Call on_hangup(key) when the peer's end of `sock` closes (once). Watch a
        socket before anyone else may close it."""
        with self._lock:
            if self._closed or sock.fileno() < 0:
                return
            self._watched[sock.fileno()] = (sock, key)
            self._epoll.register(sock.fileno(), select.EPOLLRDHUP)

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            if self._watched.pop(sock.fileno(), None) is not None and not self._closed:
                self._epoll.unregister(sock.fileno())

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        os.eventfd_write(self._wake, 1)
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for sock, _ in list(self._hellos.values()):
            sock.close()
        self._epoll.close()
        os.close(self._wake)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # ---- the thread ----------------------------------------------------------------
    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())  # the main thread's
        while not self._closed:
            timeout = min((d for _, d in self._hellos.values()), default=None)
            wait = -1 if timeout is None else max(0.0, timeout - time.monotonic())
            try:
                events = self._epoll.poll(wait)
            except OSError:
                return
            for fd, _ in events:
                if self._closed:
                    return
                try:
                    if fd == self.sock.fileno():
                        self._accept()
                    elif fd in self._hellos:
                        self._hello(fd)
                    elif fd in self._watched:
                        self._hangup(fd)
                except Exception:   # one bad event must not end the rendezvous
                    logging.getLogger("fit_rpc").exception("rendezvous %s", self.path)
            now = time.monotonic()
            for fd, (_, deadline) in list(self._hellos.items()):
                if deadline <= now:   # said nothing: not one of ours
                    self._drop(fd)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:   # EMFILE...: it stays in the backlog until we can
                return
            conn.setblocking(False)
            self._hellos[conn.fileno()] = (conn, time.monotonic() + HELLO_TIMEOUT_S)
            self._epoll.register(conn.fileno(), select.EPOLLIN)

    def _hello(self, fd: int) -> None:
        conn, _ = self._hellos.pop(fd)
        self._epoll.unregister(fd)
        fds: list[int] = []
        try:
            data, fds, _, _ = socket.recv_fds(conn, HELLO_MAX_BYTES, HELLO_MAX_FDS)
            creds = peer_creds(conn)
            hello = json.loads(data)
            if not isinstance(hello, dict):
                raise ValueError("hello is not an object")
        except (OSError, ValueError) as exc:
            close_all(fds)
            self._count("rendezvous_refused")
            _answer(conn, {"errno": 71, "error": f"bad hello: {exc}"}, [])   # EPROTO
            conn.close()
            return
        try:
            answer, out, key = self._on_hello(conn, creds, hello, fds)
        except Exception as exc:   # a bug must not end the rendezvous
            close_all(fds)
            answer, out, key = {"errno": 5, "error": f"internal error: {exc!r}"}, [], None
        _answer(conn, answer, out)   # (a connector gone already hangs up at once)
        if key is None:   # else on_hello kept the socket, and watches it: it is the link's
            conn.close()

    def _hangup(self, fd: int) -> None:
        with self._lock:
            watched = self._watched.pop(fd, None)
            if watched is None:
                return   # unwatched meanwhile
            self._epoll.unregister(fd)
        self._on_hangup(watched[1])

    def _drop(self, fd: int) -> None:
        conn, _ = self._hellos.pop(fd)
        self._epoll.unregister(fd)
        conn.close()
        self._count("rendezvous_refused")


def _answer(conn: socket.socket, answer: dict[str, Any], fds: list[int]) -> bool:
    try:
        socket.send_fds(conn, [json.dumps(answer).encode()], fds)
        return True
    except OSError:
        return False


def close_all(fds: list[int]) -> None:
    """Close every fd of a message that is refused."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
