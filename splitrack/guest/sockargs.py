"""What the socket API takes and says, as CPython and Linux do (stub.py's arguments).

- err(code): an OSError with Linux's errno and words;
- ipv4(host): an address as a dotted quad (a resolver call only for a name);
- timeout_value(v): settimeout's argument, refused as CPython refuses it;
- bytes_view(data): any bytes-like object as a flat byte view;
- scatter(data, buffers): data into recvmsg_into's buffers, in order;
- warn_host_socket(family, kind): a network socket that stays the host's
  (raw, netlink, packet) is said once a kind on stderr, never silently.
"""

import math
import operator
import os
import socket as _socket_module
import sys
from typing import Any

AF_INET = _socket_module.AF_INET


def err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def ipv4(host: Any) -> str:
    """host as a dotted quad: itself if it is one already (no resolver call: 6-10 us
    here, on every connect), else what gethostbyname says (with its errors)."""
    if type(host) is str:
        if host in _dotted:
            return host
        try:
            if _socket_module.inet_ntoa(_socket_module.inet_pton(AF_INET, host)) == host:
                if len(_dotted) < _DOTTED_MAX:
                    _dotted.add(host)
                return host
        except OSError:
            pass
    return _socket_module.gethostbyname(host)


_dotted: set[str] = set()   # the dotted quads ipv4() has seen (a program's few peers)
_DOTTED_MAX = 4096


_HOST_FAMILIES = {_socket_module.AF_UNIX}   # IPC on the pComponent, not the network
_warned: set[tuple[int, int]] = set()


def warn_host_socket(family: int, kind: int) -> None:
    """A network socket the rack cannot emulate (raw, netlink, packet) stays the
    host's: said once a kind, in one line on stderr, never silently."""
    if family in _HOST_FAMILIES or (family, kind) in _warned:
        return
    _warned.add((family, kind))
    try:
        name = f"{_socket_module.AddressFamily(family).name}/{_socket_module.SocketKind(kind).name}"
    except ValueError:
        name = f"family {family}, type {kind}"
    print(f"splitrack: a {name} socket is the host's, not the rack's: only TCP and UDP "
          f"over IPv4 cross the rack (its traffic is not emulated)", file=sys.stderr,
          flush=True)


def timeout_value(value: Any) -> float | None:
    """settimeout's argument as CPython takes it: None, a float that is not NaN, or an
    integer (anything else is a TypeError), never negative."""
    if value is None:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("Invalid value NaN (not a number)")
    else:
        value = operator.index(value)
    if value < 0:
        raise ValueError("Timeout value out of range")
    return float(value)


def bytes_view(data: Any) -> bytes | memoryview:
    """A flat byte view of any bytes-like object (a cast only where one is needed);
    bytes stay bytes (they are flat already, and every data path takes them)."""
    if type(data) is bytes:
        return data
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def scatter(data: bytes, buffers: Any) -> int:
    """recvmsg_into's copy: `data` into the buffers one after another; the count."""
    at = 0
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        k = min(len(view), len(data) - at)
        view[:k] = data[at:at + k]
        at += k
    return at
