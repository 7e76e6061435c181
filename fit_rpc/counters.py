"""Per-link, per-op message and byte counters of one FIT endpoint.

Interface:
    c = Counters()
    c.tx(peer, op, nbytes); c.rx(peer, op, nbytes)   # hot path: one dict lookup
    c.error(name[, n])                                # malformed, unknown_op, ...
    c.fold(peer, into)                                # a peer that is gone: its counts
                                                      # join `into`'s (e.g. "p0.*")
    c.snapshot() -> {"links": {peer: {op_name: {tx_msgs, tx_bytes, rx_msgs, rx_bytes}}},
                     "errors": {name: n}}
    c.add(direction, peer, op, msgs, nbytes)          # counts kept elsewhere, in bulk
    c.sources.append(fn)                              # fn(c) adds them: run before every
                                                      # snapshot and fold (a native data
                                                      # plane counts what it reads and writes;
                                                      # shm's rings count calls and channel
                                                      # messages in C: native/fitcounts.py)
Byte counts include the FIT header. Counters only grow; folding keeps every
count and bounds the table by live peers (a rack that ran a thousand programs
keeps one line per pComponent for them, not a thousand).
"""

from collections.abc import Callable

from fit_rpc.ops import op_name


class Counters:
    __slots__ = ("_tx", "_rx", "_errors", "sources")

    def __init__(self) -> None:
        self._tx: dict[tuple[str, int], list[int]] = {}
        self._rx: dict[tuple[str, int], list[int]] = {}
        self._errors: dict[str, int] = {}
        self.sources: list[Callable[[Counters], None]] = []

    def add(self, direction: str, peer: str, op: int, msgs: int, nbytes: int) -> None:
        if msgs:
            cell = (self._tx if direction == "tx" else self._rx).setdefault((peer, op), [0, 0])
            cell[0] += msgs
            cell[1] += nbytes

    def _collect(self) -> None:
        for source in self.sources:
            source(self)

    # (tx and rx count in line, not through a helper: they run for every message,
    # and a Python call costs as much as the counting)
    def tx(self, peer: str, op: int, nbytes: int) -> None:
        cell = self._tx.get((peer, op))
        if cell is None:
            self._tx[(peer, op)] = [1, nbytes]
        else:
            cell[0] += 1
            cell[1] += nbytes

    def rx(self, peer: str, op: int, nbytes: int) -> None:
        cell = self._rx.get((peer, op))
        if cell is None:
            self._rx[(peer, op)] = [1, nbytes]
        else:
            cell[0] += 1
            cell[1] += nbytes

    def error(self, name: str, n: int = 1) -> None:
        self._errors[name] = self._errors.get(name, 0) + n

    def fold(self, peer: str, into: str) -> None:
        self._collect()
        for table in (self._tx, self._rx):
            for key in [k for k in table if k[0] == peer]:
                msgs, nbytes = table.pop(key)
                cell = table.setdefault((into, key[1]), [0, 0])
                cell[0] += msgs
                cell[1] += nbytes

    def snapshot(self) -> dict:
        self._collect()
        links: dict[str, dict[str, dict[str, int]]] = {}
        for direction, table in (("tx", self._tx), ("rx", self._rx)):
            for (peer, op), (msgs, nbytes) in table.items():
                row = links.setdefault(peer, {}).setdefault(
                    op_name(op), {"tx_msgs": 0, "tx_bytes": 0, "rx_msgs": 0, "rx_bytes": 0}
                )
                row[f"{direction}_msgs"] = msgs
                row[f"{direction}_bytes"] = nbytes
        return {"links": links, "errors": dict(self._errors)}

