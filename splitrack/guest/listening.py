"""bind, listen and accept of a bsdSocketStub: a skeleton that listens on a NIC.

`Listening` is the part of BsdSocketStub (stub.py) that binds, listens and
accepts; its state is the stub's. bind asks GNM which nComponent owns the
address (0.0.0.0: the NIC GNM gives the process, and the rack loopback too)
and that nComponent's Proxy for a skeleton bound there (N_BIND); listen makes
it listen (N_LISTEN, binding first if need be). accept takes the next
connection its accept queue holds (`enqueue_accept`: one the skeleton
announced, STUB_ACCEPT, which gets a stub, its buffers and N_START here; or a
shortcut's, whose stub is made already: shortcuts.py), waiting as the timeout
says. The errors are Linux's: EINVAL (bound twice, not listening, shut down),
EADDRNOTAVAIL (no rack NIC), EBADF (closed), ENETDOWN (its nComponent died).
"""

import errno
import socket
from typing import Any

from fit_rpc import Op, codec
from splitrack.guest.nic_path import NicPath
from splitrack.guest.sockargs import err
from splitrack.guest.sockopts import LINGER


class Listening:
    """BsdSocketStub's bind, listen and accept."""

    __slots__ = ()   # (its state is the stub's)

    def bind(self, address: Any) -> None:
        self._alive()
        ip, port = self._to_rack(address)
        if self._n is not None:
            raise err(errno.EINVAL)
        any_ip = ip == "0.0.0.0"
        if any_ip:
            ip, self._n = self._rt.nic()
        else:
            self._n = self._rt.owner(ip)   # EADDRNOTAVAIL if no rack NIC
        try:
            reply = self._call(Op.N_BIND, {
                "ip": ip, "port": port, "loopback": any_ip, "opts": self._opt_list(),
                "inbox": self._rt.inbox.address, "stub": self._id, "type": self._kind})
        except OSError:
            self._n = None
            raise
        self._sk = reply["sk"]
        self._local = ("0.0.0.0" if any_ip else self._to_program((ip, 0))[0], reply["port"])

    def listen(self, backlog: int = 128) -> None:
        self._alive()
        if self._peer is not None:
            raise err(errno.EINVAL)
        if self._n is None:
            self.bind(("0.0.0.0", 0))
        self._call(Op.N_LISTEN, {"sk": self._sk, "backlog": max(0, int(backlog))})
        self._listening = True

    def accept(self) -> tuple[Any, tuple[str, int]]:
        self._alive()
        if not self._listening:
            raise err(errno.EINVAL)
        deadline, pumped = self._deadline(), False
        while True:
            with self._lock:
                if self._accepts:
                    info = self._accepts.popleft()
                    if not self._accepts and not self._error:
                        self._hush()
                    break
                if self._dead:
                    raise err(errno.EBADF)
                if self._error == errno.ENETDOWN:   # its nComponent died
                    raise err(errno.ENETDOWN)
                if self._shut_rd or self._error:   # shut down, or broken: Linux says EINVAL
                    raise err(errno.EINVAL)
            if self._timeout == 0.0 and not pumped:   # what the skeleton said meanwhile
                self._rt.pump()
                pumped = True
                continue
            self._wait_readable(deadline)
        conn = info.get("stub") or self._accepted()   # (a shortcut's is made already)
        if socket.getdefaulttimeout() is None and self._timeout is not None:
            conn.setblocking(True)   # as the stdlib's accept() does
        conn._opts = {**self._opts, **conn._opts}   # as Linux, TCP_NODELAY... inherited
        if "stub" in info:
            return conn, conn._peer
        conn._mode, conn._n, conn._sk = self._mode, self._n, info["sk"]
        conn._local = conn._to_program(info["local"])
        conn._peer = conn._to_program(info["peer"])
        conn._path = path = NicPath(conn, conn._mode)
        path.n, path.sk = conn._n, conn._sk
        self._rt.send(self._n, Op.N_START, codec.encode(
            {"sk": conn._sk, "stub": conn._id, "buffers": path.buffers}))
        if LINGER in conn._opts:
            conn._send_linger(quiet=True)
        return conn, conn._peer
