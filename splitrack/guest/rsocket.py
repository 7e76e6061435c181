"""The drop-in socket module: makes a program's `socket` the rack's.

`splitrack run` puts splitrack/guest/_dropin on the program's PYTHONPATH; its
sitecustomize.py calls install() before the program's first line. Only what
must change is replaced (curio's rule): `socket.socket` becomes the
bsdSocketStub class (a datagram one, datagram.py, for UDP), which still makes
kernel sockets for anything that is not TCP or UDP over IPv4 (AF_UNIX,
socketpair, fromfd of a kernel socket, raw and netlink sockets). Everything else -- DNS,
constants, create_connection, create_server -- is the stdlib's and reaches the
stub through `socket.socket`, as do socketserver, http.server, http.client,
urllib, selectors and asyncio. ssl is not supported on rack sockets. One more
call is replaced: subprocess's fork_exec, so that a program it starts with a
rack socket as its stdin, stdout or stderr (or in pass_fds) reaches the
socket (spawning.py). Calls on a socket's descriptor itself (os.read,
os.write, os.sendfile, io.FileIO over it...) reach its stub through the
native interposer (own_fds.py).

    from splitrack.guest import rsocket
    rsocket.install()      # idempotent; rsocket.uninstall() restores the stdlib class
"""

import socket

from splitrack.guest import spawning
from splitrack.guest.stub import BsdSocketStub, _std


def install() -> None:
    socket.socket = BsdSocketStub  # type: ignore[misc]
    spawning.install()


def uninstall() -> None:
    socket.socket = _std  # type: ignore[misc]
    spawning.uninstall()


def installed() -> bool:
    return socket.socket is BsdSocketStub


__all__ = ["install", "uninstall", "installed", "BsdSocketStub"]
