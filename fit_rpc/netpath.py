"""Fixed binary layouts of the network path's hot messages (docs/protocol.md, 0x06xx/0x07xx).

A skeleton is named by a u32 id its nComponent chose (unique per nComponent).
    SK     <I>    sk                 N_CLOSE; STUB_DATA: then the bytes
    SK_N   <II>   (sk, n)            N_SEND, N_SEND_DMA, N_CREDIT, STUB_SENT, STUB_DATA_DMA
    SK_ERR <Ii>   (sk, value)        STUB_CLOSED (errno, 0 = EOF), N_SHUTDOWN (how)
    DMA_MAP <IQII> (pid, addr, n, flags)   M_DMA_MAP (flags: DMA_WRITE, DMA_HOLD); reply
                                           DMA_LEASE, then that many PIECEs
    DMA_LEASE <II> (lease, pieces)
    PIECE  <qI>   (arena offset, length); offset -1: a page never written (reads as zeros)
    SK     <I>    lease                    M_DMA_DONE
The control ops (N_BIND, N_CONNECT, N_LISTEN, N_START, N_SOCKOPT, N_RELEASE,
STUB_ACCEPT) use the JSON "args" layout (codec.py): they are not per-byte.
"""

import struct

SK = struct.Struct("<I")
SK_N = struct.Struct("<II")
SK_ERR = struct.Struct("<Ii")
DMA_MAP = struct.Struct("<IQII")
DMA_WRITE = 1   # M_DMA_MAP: take (zeroed) frames for pages that have none
DMA_HOLD = 2    # M_DMA_MAP: the lease lives until M_DMA_DONE or the process's release
DMA_LEASE = struct.Struct("<II")
PIECE = struct.Struct("<qI")


def ring_pieces(ring: tuple[int, int] | list[int], pos: int, n: int) -> list[tuple[int, int]]:
    """(address, length) of n bytes from stream offset `pos` of a ring (start, size),
    cut where it wraps. Stub and skeleton walk a stub's buffers with this."""
    start, size = ring
    pos %= size
    first = min(n, size - pos)
    return [(start + pos, first)] + ([(start, n - first)] if n > first else [])
