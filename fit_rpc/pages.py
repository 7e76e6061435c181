"""Fixed binary layouts of the memory path's hot messages (docs/protocol.md, 0x04xx).

M_MISS request:   MISS = <I Q I Q> (pid, vpage, victim_pid, victim_vpage), then, if
                  victim_pid != 0, the victim's dirty line (LegoOS piggyback: a
                  dirty victim bound for the same mComponent rides along).
                  Reply: the missed line's bytes (line size of the rack).
M_WRITEBACK:      WRITEBACK = <I I> (pid, n), then n lines, then n u64 vpages
                  (lines first: a flush cleans lines straight into a reused
                  message, `WritebackMessage`, before it knows how many).
                  Reply: empty.
M_FETCH:          FETCH = <I Q I> (pid, vpage, n): n consecutive lines from vpage
                  (1 <= n <= FETCH_MAX_LINES). Reply: n lines, zeros where never
                  written back.
JSON is too slow here (several µs a message); these are struct.pack'ed.
"""

import struct
from typing import Any

from fit_rpc.header import HEADER_SIZE

MISS = struct.Struct("<IQIQ")
FETCH = struct.Struct("<IQI")
FETCH_MAX_LINES = 64
WRITEBACK = struct.Struct("<II")
VPAGE = struct.Struct("<Q")


def pack_writeback(pid: int, vpages: list[int], lines: list[Any]) -> bytes:
    return b"".join((WRITEBACK.pack(pid, len(vpages)), *lines,
                     struct.pack(f"<{len(vpages)}Q", *vpages)))


class WritebackMessage:
    """One M_WRITEBACK, built in place and reused: FIT header room first (sent with
    Endpoint.call(..., room=True)), then the lines, cleaned straight into it -- no
    copy per line and no allocation per message on the flush path."""

    def __init__(self, line: int, capacity: int):
        self.line, self.capacity = line, capacity
        self.start = HEADER_SIZE + WRITEBACK.size
        self.buf = memoryview(bytearray(self.start + capacity * (line + VPAGE.size)))
        self.vpages: list[int] = []

    def room(self) -> memoryview:
        """Where the next lines go, as many as still fit (add() them once there)."""
        at = self.start + len(self.vpages) * self.line
        return self.buf[at:self.start + self.capacity * self.line]

    def add(self, vpages: list[int]) -> bool:
        """The next lines are these pages'; True when the message is full."""
        self.vpages += vpages
        return len(self.vpages) == self.capacity

    def take(self, pid: int) -> memoryview:
        """The message, header room included; empty again for the next one."""
        n, end = len(self.vpages), self.start + len(self.vpages) * self.line
        WRITEBACK.pack_into(self.buf, HEADER_SIZE, pid, n)
        struct.pack_into(f"<{n}Q", self.buf, end, *self.vpages)
        self.vpages = []
        return self.buf[:end + n * VPAGE.size]


def unpack_writeback(payload: memoryview, line: int) -> tuple[int, list[int], memoryview]:
    """(pid, vpages, lines) -- lines is a view holding len(vpages) * line bytes."""
    from fit_rpc.errors import MalformedMessage

    if len(payload) < WRITEBACK.size:
        raise MalformedMessage("write-back shorter than its header")
    pid, n = WRITEBACK.unpack_from(payload)
    lines_end = WRITEBACK.size + n * line
    if len(payload) != lines_end + n * VPAGE.size:
        raise MalformedMessage(f"write-back of {n} pages has {len(payload)} bytes")
    vpages = list(struct.unpack_from(f"<{n}Q", payload, lines_end))
    return pid, vpages, payload[WRITEBACK.size:lines_end]
