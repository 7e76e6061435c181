"""Fixed binary layouts of the network path's hot messages (docs/protocol.md, 0x06xx/0x07xx).

A skeleton is named by a u32 id its nComponent chose (unique per nComponent).
    SK     <I>    sk                 N_CLOSE; STUB_DATA: then the bytes
    SK_N   <II>   (sk, n)            N_SEND, N_SEND_DMA, N_CREDIT, STUB_SENT, STUB_DATA_DMA
    SK_ERR <Ii>   (sk, value)        STUB_CLOSED (errno, 0 = EOF), N_SHUTDOWN (how),
                                     STUB_DGRAM_ERROR (errno)
    DGRAM  <I4sH2x> (n, IPv4, port)  a datagram's record in a datagram socket's rings,
                                     then its n bytes: the destination of one sent, the
                                     source of one received (0.0.0.0:0: the connected
                                     peer's); MAX_DATAGRAM bytes at most
    DMA_MAP <IQII> (pid, addr, n, flags)   M_DMA_MAP (flags: DMA_WRITE, DMA_HOLD); reply
                                           DMA_LEASE, then that many PIECEs
    DMA_LEASE <II> (lease, pieces)
    PIECE  <qI>   (arena offset, length); offset -1: a page never written (reads as zeros)
    SK     <I>    lease                    M_DMA_DONE
    CONNECT ...   N_CONNECT, whose nComponent answers it in C (native/skelconnect.h):
                  <II4s4sHBBIQIQId16sHH> stub, sk (0: a new socket), src, dst (IPv4),
                  port, mode (MODES), flags (CONNECT_TIMEOUT), window, rbuf (addr,
                  size), tbuf (addr, size), timeout (s), home (NUL-padded), nopts,
                  ninbox; then nopts OPT <iii> (level, opt, value), then the inbox
    CONNECTED <I4sHH> (sk, local ip, local port, flags: CONNECT_PENDING)   its reply
    pack_connect(args) / unpack_connect(payload) -> args    the layout <-> N_CONNECT's
    connect_request(stub, sk, src, ip, port, buffers, timeout, opts, inbox)
                                                            pack_connect's, from fields
    pack_connected(sk, local, pending) / unpack_connected(payload) -> {sk, local, pending}
                                                            args (docs/protocol.md)
The other control ops (N_BIND, N_LISTEN, N_START, N_SOCKOPT, N_RELEASE,
STUB_ACCEPT) use the JSON "args" layout (codec.py): they are not per-byte, nor
on the way of a connect() that Linux makes in one system call.
"""

import errno
import functools
import math
import socket
import struct
from typing import Any

SK = struct.Struct("<I")
SK_N = struct.Struct("<II")
SK_ERR = struct.Struct("<Ii")
CLOSE_UNREAD = b"\x01"   # N_CLOSE's byte after SK: the stub closed with bytes unread (reset)
DMA_MAP = struct.Struct("<IQII")
DMA_WRITE = 1   # M_DMA_MAP: take (zeroed) frames for pages that have none
DMA_HOLD = 2    # M_DMA_MAP: the lease lives until M_DMA_DONE or the process's release
DMA_LEASE = struct.Struct("<II")
PIECE = struct.Struct("<qI")
CONNECT = struct.Struct("<II4s4sHBBIQIQId16sHH")
OPT = struct.Struct("<iii")
CONNECTED = struct.Struct("<I4sHH")
DGRAM = struct.Struct("<I4sH2x")
MAX_DATAGRAM = 65507   # bytes of a UDP datagram's payload over IPv4, as Linux takes them
MODES = ("ddio", "dma")   # CONNECT's mode: an index
_MODE = {name: i for i, name in enumerate(MODES)}
CONNECT_TIMEOUT = 1       # CONNECT's flags: timeout is set (else: none)
CONNECT_PENDING = 1       # CONNECTED's flags: the handshake goes on (STUB_CONNECTED ends it)
HOME_BYTES = 16


def pack_connect(args: dict[str, Any]) -> bytes:
    """N_CONNECT's payload from its args: {stub, sk?, src?, dst: [ip, port], timeout,
    buffers: {mode, home, window, rbuf, tbuf}, opts?, inbox} (unpack_connect's)."""
    ip, port = args["dst"]
    return connect_request(args["stub"], args.get("sk", 0), args.get("src"), ip, port,
                           args["buffers"], args.get("timeout"), args.get("opts"),
                           args["inbox"])


def connect_request(stub: int, sk: int, src: str | None, ip: str, port: int,
                    buffers: dict[str, Any], timeout: float | None,
                    opts: list[list[int]] | None, inbox: str) -> bytes:
    """pack_connect's payload from the fields themselves (the stub's, on every
    connect(): the names it packs again and again -- inbox, home, addresses -- are
    encoded once)."""
    inbox_b, home = _text(inbox), _home(buffers["home"])
    (rbuf, rsize), (tbuf, tsize) = buffers["rbuf"], buffers["tbuf"]
    mode = _MODE.get(buffers["mode"]) if type(buffers["mode"]) is str else None
    if mode is None:
        raise ValueError(f"no data path {buffers['mode']!r} (one of {', '.join(MODES)})")
    head = CONNECT.pack(
        stub, sk, _ipv4(src or "0.0.0.0"), _ipv4(ip), port, mode,
        0 if timeout is None else CONNECT_TIMEOUT, buffers["window"], rbuf, rsize, tbuf,
        tsize, 0.0 if timeout is None else timeout, home, len(opts) if opts else 0,
        len(inbox_b))
    if opts:
        return b"".join((head, *(OPT.pack(*o) for o in opts), inbox_b))
    return head + inbox_b


@functools.lru_cache(maxsize=256)
def _text(name: str) -> bytes:
    return name.encode()


@functools.lru_cache(maxsize=256)
def _ipv4(ip: str) -> bytes:
    return socket.inet_aton(ip)


@functools.lru_cache(maxsize=64)
def _home(name: str) -> bytes:
    home = name.encode()
    if len(home) > HOME_BYTES:
        raise ValueError(f"an mComponent id of {len(home)} bytes: {name!r}")
    return home


def unpack_connect(payload: bytes | memoryview) -> dict[str, Any]:
    """pack_connect's args again (struct.error: too short; EINVAL: what no args are)."""
    (stub, sk, src, dst, port, mode, flags, window, rbuf, rbuf_size, tbuf, tbuf_size,
     timeout, home, nopts, ninbox) = CONNECT.unpack_from(payload)
    at = CONNECT.size + nopts * OPT.size
    if len(payload) != at + ninbox:
        raise OSError(errno.EINVAL, f"N_CONNECT of {len(payload)} bytes, not {at + ninbox}")
    if mode >= len(MODES):
        raise OSError(errno.EINVAL, f"no data path {mode} (0 ddio, 1 dma)")
    if flags & CONNECT_TIMEOUT and not (math.isfinite(timeout) and timeout >= 0):
        raise OSError(errno.EINVAL, f"a connect timeout of {timeout} s")
    try:
        home_id, inbox = home.rstrip(b"\0").decode("ascii"), \
            bytes(payload[at:at + ninbox]).decode("utf-8")
    except UnicodeDecodeError:
        raise OSError(errno.EINVAL, "N_CONNECT's home or inbox is not text") from None
    args: dict[str, Any] = {
        "stub": stub, "dst": [socket.inet_ntoa(dst), port], "inbox": inbox,
        "timeout": timeout if flags & CONNECT_TIMEOUT else None,
        "buffers": {"mode": MODES[mode], "home": home_id, "window": window,
                    "rbuf": [rbuf, rbuf_size], "tbuf": [tbuf, tbuf_size]},
        "opts": [list(OPT.unpack_from(payload, CONNECT.size + i * OPT.size))
                 for i in range(nopts)]}
    if sk:
        args["sk"] = sk
    else:   # 0.0.0.0: none (the Proxy's unbound socket)
        args["src"] = "" if src == bytes(4) else socket.inet_ntoa(src)
    return args


def pack_connected(sk: int, local: tuple[str, int] | list, pending: bool) -> bytes:
    return CONNECTED.pack(sk, socket.inet_aton(local[0]), local[1],
                          CONNECT_PENDING if pending else 0)


def unpack_connected(payload: bytes | memoryview) -> dict[str, Any]:
    sk, ip, port, flags = CONNECTED.unpack_from(payload)
    return {"sk": sk, "local": [socket.inet_ntoa(ip), port],
            "pending": bool(flags & CONNECT_PENDING)}


def ring_pieces(ring: tuple[int, int] | list[int], pos: int, n: int) -> list[tuple[int, int]]:
    """(address, length) of n bytes from stream offset `pos` of a ring (start, size),
    cut where it wraps. Stub and skeleton walk a stub's buffers with this."""
    start, size = ring
    pos %= size
    first = min(n, size - pos)
    return [(start + pos, first)] + ([(start, n - first)] if n > first else [])
