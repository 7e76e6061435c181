"""Fixed binary layouts of the memory path's hot messages (docs/protocol.md, 0x04xx).

M_MISS request:   MISS = <I Q I Q> (pid, vpage, victim_pid, victim_vpage), then, if
                  victim_pid != 0, the victim's dirty line (LegoOS piggyback: a
                  dirty victim bound for the same mComponent rides along).
                  Reply: the missed line's bytes (line size of the rack).
M_WRITEBACK:      WRITEBACK = <I I> (pid, n), then n u64 vpages, then n lines.
                  Reply: empty.
M_FETCH:          FETCH = <I Q I> (pid, vpage, n): n consecutive lines from vpage
                  (1 <= n <= FETCH_MAX_LINES). Reply: n lines, zeros where never
                  written back.
JSON is too slow here (several µs a message); these are struct.pack'ed.
"""

import struct

MISS = struct.Struct("<IQIQ")
FETCH = struct.Struct("<IQI")
FETCH_MAX_LINES = 64
WRITEBACK = struct.Struct("<II")
VPAGE = struct.Struct("<Q")


def pack_writeback(pid: int, vpages: list[int], lines: list[bytes]) -> bytes:
    return b"".join((WRITEBACK.pack(pid, len(vpages)),
                     struct.pack(f"<{len(vpages)}Q", *vpages), *lines))


def unpack_writeback(payload: memoryview, line: int) -> tuple[int, list[int], memoryview]:
    """(pid, vpages, lines) -- lines is a view holding len(vpages) * line bytes."""
    from fit_rpc.errors import MalformedMessage

    if len(payload) < WRITEBACK.size:
        raise MalformedMessage("write-back shorter than its header")
    pid, n = WRITEBACK.unpack_from(payload)
    pages_end = WRITEBACK.size + 8 * n
    if len(payload) != pages_end + n * line:
        raise MalformedMessage(f"write-back of {n} pages has {len(payload)} bytes")
    vpages = list(struct.unpack_from(f"<{n}Q", payload, WRITEBACK.size))
    return pid, vpages, payload[pages_end:]
