"""Socket options of a bsdSocketStub: setsockopt() and getsockopt().

`Options` is the part of BsdSocketStub (stub.py) that holds them; its state is
the stub's `_opts`, {(level, option): value}. Three kinds:

- FORWARDED (SO_REUSEADDR, SO_REUSEPORT, SO_KEEPALIVE, SO_RCVBUF, SO_SNDBUF,
  SO_BROADCAST, TCP_NODELAY): the skeleton's kernel socket's. Set before it exists, they go
  with N_BIND / N_CONNECT (`_opt_list`); after, N_SOCKOPT sets or reads them
  there. An accepted socket inherits its listener's, as on Linux.
- the stub's own: SO_RCVLOWAT (a blocking recv waits for that many bytes, or
  what it asked for if less; 0 is 1 and a negative value INT_MAX, as Linux
  takes them), SO_RCVTIMEO and SO_SNDTIMEO (a struct timeval: how long a
  blocking socket's recv or accept, or its send, waits before EAGAIN, or a
  send its count so far; {0, 0} is forever, a negative time no wait, a
  tv_usec out of 0..999999 EDOM, as Linux takes them, and 23 days or more
  forever (read back as {0, 0}); a socket with a
  Python timeout is non-blocking underneath, as CPython's, and has its
  timeout instead; a connect() whose handshake waits longer than SO_SNDTIMEO
  ends with EINPROGRESS, its handshake going on, as Linux's), and SO_LINGER
  (a struct linger: l_onoff, l_linger). Linger on
  with 0 s is an abortive close: the skeleton's kernel socket gets it (N_SOCKOPT
  `linger`), so its close drops what is not sent and resets the connection, as
  Linux's does. On with a time, it is kept and reported, but close() does not
  wait for the bytes to be acknowledged (the nComponent would block in the
  kernel's close): they drain as without it. On a shortcut, linger changes
  nothing.
- read-only: SO_ERROR (the pending error, once: SO_ERROR then clears it),
  SO_TYPE, and what the skeleton's kernel TCP says of the connection
  (TCP_INFO, TCP_CONGESTION: with a buflen, as bytes; TCP_MAXSEG); with no
  skeleton (a shortcut, before bind or connect) those are ENOPROTOOPT.

Anything else is ENOPROTOOPT, as for an option the kernel does not know.
"""

import errno
import socket as _socket_module
import struct
from typing import Any

from fit_rpc import Op
from splitrack.guest.nic_path import NicPath
from splitrack.guest.sockargs import err

SOL_SOCKET = _socket_module.SOL_SOCKET
FORWARDED = {(SOL_SOCKET, o) for o in (
    _socket_module.SO_REUSEADDR, _socket_module.SO_REUSEPORT, _socket_module.SO_KEEPALIVE,
    _socket_module.SO_RCVBUF, _socket_module.SO_SNDBUF, _socket_module.SO_BROADCAST)} | {
    (_socket_module.IPPROTO_TCP, _socket_module.TCP_NODELAY)}
RCVLOWAT = (SOL_SOCKET, _socket_module.SO_RCVLOWAT)
LINGER = (SOL_SOCKET, _socket_module.SO_LINGER)
RCVTIMEO = (SOL_SOCKET, _socket_module.SO_RCVTIMEO)
SNDTIMEO = (SOL_SOCKET, _socket_module.SO_SNDTIMEO)
TCP = _socket_module.IPPROTO_TCP
READ_ONLY = {(TCP, _socket_module.TCP_INFO), (TCP, _socket_module.TCP_CONGESTION),
             (TCP, _socket_module.TCP_MAXSEG)}   # the skeleton's kernel TCP's (monitors/proxy.py)
_LINGER = struct.Struct("ii")   # struct linger
_TIMEVAL = struct.Struct("qq")  # struct timeval (tv_sec, tv_usec)
_INT_MAX = 2 ** 31 - 1
_FOREVER_S = 2_000_000   # SO_RCVTIMEO or SO_SNDTIMEO from this many seconds on (23 days):
                         # no limit (a poll() takes at most INT_MAX ms)


class Options:
    """BsdSocketStub's setsockopt() and getsockopt()."""

    __slots__ = ()   # (its state is the stub's)

    def setsockopt(self, level: int, optname: int, value: Any, optlen: int | None = None
                   ) -> None:
        self._alive()
        key = (level, optname)
        if key == LINGER:
            return self._set_linger(value)
        if key in (RCVTIMEO, SNDTIMEO):
            return self._set_wait(key, value)
        if key not in FORWARDED and key != RCVLOWAT:
            raise err(errno.ENOPROTOOPT)
        if not isinstance(value, int):
            raise err(errno.EINVAL)
        if not -(1 << 31) <= value < 1 << 31:   # CPython's: not a C int, so not an int
            raise TypeError("a bytes-like object is required, not 'int'")
        if key == RCVLOWAT:
            self._opts[key] = _INT_MAX if value < 0 else value or 1
            return
        if self._sk:
            self._call(Op.N_SOCKOPT, {"sk": self._sk, "level": level, "opt": optname,
                                      "value": value})
        self._opts[key] = value
        if key == (_socket_module.IPPROTO_TCP, _socket_module.TCP_NODELAY) \
                and self._path is not None and self._n is not None:
            with self._lock:
                self._path.sync_packing()
                if value:   # as Linux, what waits goes now
                    self._path.announce_held()

    def _set_linger(self, value: Any) -> None:
        try:
            onoff, seconds = _LINGER.unpack_from(bytes(memoryview(value)))
        except (TypeError, struct.error):   # not a struct linger: too short, an int
            raise err(errno.EINVAL) from None
        self._opts[LINGER] = (onoff, seconds)
        self._send_linger()

    def _set_wait(self, key: tuple[int, int], value: Any) -> None:
        try:
            seconds, micros = _TIMEVAL.unpack_from(bytes(memoryview(value)))
        except (TypeError, struct.error):   # not a struct timeval: too short, an int
            raise err(errno.EINVAL) from None
        if not 0 <= micros < 1_000_000:
            raise err(errno.EDOM)
        if seconds < 0:
            self._opts[key] = 0.0   # no wait
        elif seconds >= _FOREVER_S:   # (past what a poll() can wait: for ever)
            self._opts[key] = None
        else:
            self._opts[key] = (seconds + micros / 1e6) or None

    def _send_linger(self, quiet: bool = False) -> None:
        """The skeleton's kernel socket resets at close if linger is on with 0 s.
        quiet: best effort (a connect or accept that made it: a socket already
        connected, which a failure here must not undo)."""
        onoff, seconds = self._opts.get(LINGER, (0, 0))
        if self._sk and self._n is not None:
            try:
                self._call(Op.N_SOCKOPT, {"sk": self._sk, "level": SOL_SOCKET,
                                          "opt": LINGER[1], "linger": [onoff, seconds]})
            except OSError:
                if not quiet:
                    raise

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> Any:
        self._alive()
        key = (level, optname)
        if key == LINGER:
            packed = _LINGER.pack(*self._opts.get(LINGER, (0, 0)))
            return packed[:buflen] if buflen else _LINGER.unpack(packed)[0]
        if key in (RCVTIMEO, SNDTIMEO):
            wait = self._opts.get(key) or 0.0
            seconds, micros = int(wait), round(wait % 1 * 1e6)
            packed = _TIMEVAL.pack(*((seconds + 1, 0) if micros == 1_000_000 else
                                     (seconds, micros)))
            return packed[:buflen] if buflen else _TIMEVAL.unpack(packed)[0]
        if key in READ_ONLY:
            if not self._sk or self._path is not None and not isinstance(self._path, NicPath):
                raise err(errno.ENOPROTOOPT)   # no skeleton: no kernel TCP to ask
            got = self._call(Op.N_SOCKOPT, {"sk": self._sk, "level": level, "opt": optname,
                                            **({"buflen": buflen} if buflen else {})})
            return bytes.fromhex(got["raw"]) if buflen else got["value"]
        if buflen:
            raise err(errno.EOPNOTSUPP)
        if key == (SOL_SOCKET, _socket_module.SO_ERROR):
            self._rt.pump()   # what the skeleton said so far
            self._settle()
            with self._lock:
                return self._error_once() if self._error else 0
        if key == (SOL_SOCKET, _socket_module.SO_TYPE):
            return int(self.type)   # (an int, as the kernel's getsockopt gives it)
        if key == RCVLOWAT:
            return self._opts.get(key, 1)
        if key not in FORWARDED:
            raise err(errno.ENOPROTOOPT)
        if self._sk:
            return self._call(Op.N_SOCKOPT, {"sk": self._sk, "level": level,
                                             "opt": optname})["value"]
        return self._opts.get(key, 0)

    def _opt_list(self) -> list[list[int]]:
        """The options the skeleton's kernel socket takes when it is made."""
        return [[level, opt, value] for (level, opt), value in self._opts.items()
                if (level, opt) in FORWARDED]
