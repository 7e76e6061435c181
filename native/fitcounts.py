"""Counts kept in C of what a FIT link's calls or a channel end's messages did in
full (fitserve.h: fs_counts), part of the fitring binding (native/fitring.py).

Interface:
    counts = Counts()                   a table C counts into: Ring.post's, and
                                        WaitSet.call's and recv's (WaitSet.calls(...,
                                        counts)): a link's, or a channel end's
    counts.handle                       what the C calls take
    counts.taken() -> [(op, tx_msgs, tx_bytes, rx_msgs, rx_bytes)]
                                        what was counted since the last taken(), by
                                        op (op 0: ops past the table's)

The hot path counts in C, a few stores; whoever reports the counts (a FIT
Counters source: fit_rpc/channel.py, endpoint.py) takes them when it reports.
taken() may run in any thread, concurrently with the counting, and never loses
a message: it reports each count's growth since its last look.
"""

import threading
from typing import Any

from native.ring import ffi, lib

ROWS = lib.FS_COUNTED_OPS


class Counts:
    __slots__ = ("handle", "_seen", "_lock")

    def __init__(self) -> None:
        self.handle = ffi.new("fs_counts *")
        self._seen = [(0, 0, 0, 0)] * ROWS   # each row's counts, as last taken
        self._lock = threading.Lock()

    def taken(self) -> list[tuple[int, int, int, int, int]]:
        out = []
        with self._lock:
            for i in range(ROWS):
                row: Any = self.handle.row[i]
                tx_msgs, rx_msgs = row.tx_msgs, row.rx_msgs   # (first: C writes a row's
                if not (tx_msgs or rx_msgs):                  # op and bytes before them)
                    break   # rows fill in order: none after an empty one
                now = (tx_msgs, row.tx_bytes, rx_msgs, row.rx_bytes)
                last = self._seen[i]
                if now != last:
                    self._seen[i] = now
                    out.append((row.op, *(a - b for a, b in zip(now, last, strict=True))))
        return out
