"""Counts kept in C of the messages a FIT channel end posts or receives
(fitserve.h: fs_counts), part of the fitring binding (native/fitring.py).

Interface:
    counts = Counts()                   a table C counts into: Ring.post's, or
                                        fs_recv's (WaitSet.calls(..., counts))
    counts.handle                       what the C calls take
    counts.taken() -> [(op, msgs, nbytes)]   what was counted since the last
                                        taken(), by op (op 0: ops past the table's)

The hot path counts in C, a few stores; whoever reports the counts (a FIT
Counters source: fit_rpc/channel.py) takes them when it reports. taken() may
run in any thread, concurrently with the counting, and never loses a message:
it reports each count's growth since its last look.
"""

import threading
from typing import Any

from native.ring import ffi, lib

ROWS = lib.FS_COUNTED_OPS


class Counts:
    __slots__ = ("handle", "_seen", "_lock")

    def __init__(self) -> None:
        self.handle = ffi.new("fs_counts *")
        self._seen = [(0, 0)] * ROWS   # each row's msgs and bytes, as last taken
        self._lock = threading.Lock()

    def taken(self) -> list[tuple[int, int, int]]:
        out = []
        with self._lock:
            for i in range(ROWS):
                row: Any = self.handle.row[i]
                msgs = row.msgs   # (first: C writes a row's op and bytes before its msgs)
                if not msgs:
                    break   # rows fill in order: none after an empty one
                last_msgs, last_bytes = self._seen[i]
                if msgs != last_msgs:
                    nbytes = row.bytes
                    self._seen[i] = (msgs, nbytes)
                    out.append((row.op, msgs - last_msgs, nbytes - last_bytes))
        return out
