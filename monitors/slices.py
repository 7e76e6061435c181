"""Slices of a shared rack: which components are granted to which job (pure data).

A slice is a named set of whole components granted to one job: pComponents,
mComponents and nComponents (with all their NICs). A component is free
(slice None) or in exactly one slice. sComponents are shared: a slice has its
own root `slices/<name>/` on each (monitors/storage_root.py), so they are in none.
A process pN.PID is in the slice of its pComponent pN (its id is vouched for by
the kernel and by pN); everything else (global, the monitors, clients such as
the CLI or the rack manager) is in none and confined by none.

Interface:
    slices = Slices({"p": ["p0", "p1"], "m": ["m0"], "n": ["n0"]}, {"n0": ["127.0.0.11"]})
    slices.grant("wc", {"p": 1, "m": 1, "n": 0}, up={"p0", "p1", "m0"}, now=time.time())
        -> SLICE {name, components, nics, granted_at}; the lowest free ids
    slices.release("wc") -> SLICE
    slices.table() -> {"p0": "wc", "p1": None, ...}   every component's slice
    slices.save(path) / Slices.load(path, ...)        slices.json, written atomically
    slice_of(table, "p0.4242") -> "wc"                 a component's or a process's slice
    allowed(table, "p0.4242", "m1") -> bool            may that one use that component?
Errors (OSError): EINVAL bad name or counts (name: [a-z][a-z0-9-]{0,31}); E2BIG more
than the rack has; EEXIST the name is taken; EBUSY not enough free now; ENOENT no
such slice. The monitors and global map FIT ops onto this (docs/protocol.md, 0x025x).
"""

import errno
import json
import os
import re
from collections.abc import Collection
from typing import Any

from fit_rpc.identity import kind_of, process_of

KINDS = {"p": "pComponent", "m": "mComponent", "n": "nComponent"}   # a slice's kinds
NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")

Table = dict[str, str | None]   # component id -> its slice (None: free)


def slice_of(table: Table, who: str) -> str | None:
    """The slice of a component id, or of a process (its pComponent's); else None."""
    owner = process_of(who)
    return table.get(owner[0] if owner else who)


def allowed(table: Table, who: str, component: str) -> bool:
    """May `who` use `component`? A process only a component of its own slice (both
    may be None: free); anyone else (a component, a client) any component."""
    return kind_of(who) != "process" or slice_of(table, who) == table.get(component)


def describe(name: str | None) -> str:
    return f"slice {name}" if name else "no slice"


class Slices:
    def __init__(self, ids: dict[str, list[str]], nics: dict[str, list[str]]):
        self.ids = ids            # kind -> the rack's component ids, natural order
        self.nics = nics          # nComponent -> its NICs
        self.slices: dict[str, dict[str, Any]] = {}   # name -> SLICE

    def table(self) -> Table:
        out: Table = {cid: None for kind in KINDS for cid in self.ids.get(kind, [])}
        for s in self.slices.values():
            out.update(dict.fromkeys(s["components"], s["name"]))
        return out

    def get(self, name: str) -> dict[str, Any]:
        if name not in self.slices:
            raise OSError(errno.ENOENT, f"no slice {name!r}")
        return self.slices[name]

    def grant(self, name: Any, counts: dict[str, Any], up: Collection[str],
              now: float) -> dict[str, Any]:
        """Grant `counts` {p, m, n} free components that are `up` to slice `name`."""
        _check(name, counts)
        short = [f"only {len(self.ids.get(k, []))} {KINDS[k]}s, {counts[k]} asked"
                 for k in KINDS if counts[k] > len(self.ids.get(k, []))]
        if short:
            raise OSError(errno.E2BIG, "the rack has " + "; ".join(short))
        if name in self.slices:
            raise OSError(errno.EEXIST, f"slice {name!r} exists")
        table = self.table()
        chosen: list[str] = []
        for kind in KINDS:
            free = [c for c in self.ids.get(kind, []) if table[c] is None and c in up]
            if len(free) < counts[kind]:
                raise OSError(errno.EBUSY, f"only {len(free)} of {counts[kind]} "
                                           f"{KINDS[kind]}s free")
            chosen += free[:counts[kind]]
        nics = [ip for c in chosen for ip in self.nics.get(c, [])]
        self.slices[name] = {"name": name, "components": chosen, "nics": nics,
                             "granted_at": now}
        return self.slices[name]

    def release(self, name: str) -> dict[str, Any]:
        self.get(name)
        return self.slices.pop(name)

    def save(self, path: str) -> None:
        """Write the slices to `path` atomically (a reader sees the old or the new)."""
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"slices": list(self.slices.values())}, f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, ids: dict[str, list[str]], nics: dict[str, list[str]]
             ) -> "Slices":
        """The slices saved at `path` (none if there is no file)."""
        slices = cls(ids, nics)
        try:
            with open(path) as f:
                saved = json.load(f)["slices"]
        except FileNotFoundError:
            return slices
        slices.slices = {s["name"]: s for s in saved}
        return slices


def _check(name: Any, counts: dict[str, Any]) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise OSError(errno.EINVAL, f"slice name {name!r} is not [a-z][a-z0-9-]{{0,31}}")
    for kind, least in (("p", 1), ("m", 0), ("n", 0)):
        n = counts.get(kind)
        if not isinstance(n, int) or isinstance(n, bool) or n < least:
            raise OSError(errno.EINVAL, f"{kind!r}: {n!r} is not an integer >= {least}")
