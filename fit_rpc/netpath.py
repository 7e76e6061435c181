"""Fixed binary layouts of the network path's hot messages (docs/protocol.md, 0x06xx/0x07xx).

A skeleton is named by a u32 id its nComponent chose (unique per nComponent).
    SK     <I>    sk                 N_CLOSE; STUB_DATA: then the bytes
    SK_N   <II>   (sk, n)            N_SEND, N_SEND_DMA, N_CREDIT, STUB_SENT, STUB_DATA_DMA
    SK_ERR <Ii>   (sk, value)        STUB_CLOSED (errno, 0 = EOF), N_SHUTDOWN (how)
    DMA    <IQI>  (pid, addr, n)     M_DMA_READ (reply: n bytes); M_DMA_WRITE: then n bytes
The control ops (N_BIND, N_CONNECT, N_LISTEN, N_START, N_SOCKOPT, N_RELEASE,
STUB_ACCEPT) use the JSON "args" layout (codec.py): they are not per-byte.
"""

import struct

SK = struct.Struct("<I")
SK_N = struct.Struct("<II")
SK_ERR = struct.Struct("<Ii")
DMA = struct.Struct("<IQI")


def ring_pieces(ring: tuple[int, int] | list[int], pos: int, n: int) -> list[tuple[int, int]]:
    """(address, length) of n bytes from stream offset `pos` of a ring (start, size),
    cut where it wraps. Stub and skeleton walk a stub's buffers with this."""
    start, size = ring
    pos %= size
    first = min(n, size - pos)
    return [(start + pos, first)] + ([(start, n - first)] if n > first else [])
