"""The channel between a fork()ed child and its parent: a length, a pickle, and descriptors.

One Unix socketpair per child (forked.py). Each message is a u32 length
(little-endian), then that many bytes of a pickle; descriptors ride with the
length (SCM_RIGHTS). The child speaks first, its pid; then each of its calls is
(token, method, args) and each reply (ok, result or the OSError raised), with
the descriptor of a handle the call made. Token INHERIT names no handle: an
exec()ed image's `inherit` call.

    send_message(channel, obj, fds)           one message
    receive_message(channel) -> (obj, fds)    one message; EOFError if the peer is gone
"""

import pickle
import socket as _socket_module
import struct
from typing import Any

from splitrack.guest import preloaded

_LEN = struct.Struct("<I")
INHERIT = -1                    # the token of a call on no handle: an image's `inherit`


def send_message(channel: Any, obj: Any, fds: list[int]) -> None:
    data = pickle.dumps(obj)
    message = _LEN.pack(len(data)) + data
    sent = 0
    if fds:
        with preloaded.quiet():   # (rack sockets' descriptors: the interposer refuses a
            sent = _socket_module.send_fds(channel, [message[:4]], fds)   # program's)
    channel.sendall(message[sent:])


def receive_message(channel: Any) -> tuple[Any, list[int]]:
    head, fds, _, _ = _socket_module.recv_fds(channel, 4, 4)
    if not head:
        raise EOFError
    while len(head) < 4:
        more = channel.recv(4 - len(head))
        if not more:
            raise EOFError
        head += more
    n, = _LEN.unpack(head)
    data = bytearray()
    while len(data) < n:
        more = channel.recv(min(n - len(data), 1 << 20))
        if not more:
            raise EOFError
        data += more
    return pickle.loads(data), fds
