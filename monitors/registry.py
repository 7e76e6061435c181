"""The global process's component registry and LegoOS's placement policies.

GPM, GMM and GSM are views of one registry of components (id, kind, address,
pid, resources, load):
- GPM.place()      the least-loaded pComponent (fewest processes; ties: lowest
                   id); the placement counts as load until the pMonitor reports.
- GMM.place(size)  the least-loaded mComponent (used/total) that still has
                   `size` bytes free; the bytes are reserved. ENOMEM if none.
- GSM.lookup(path) the sComponent that holds `path`: a stable hash of the
                   path's first component over the sComponents, so a directory
                   tree stays on one sComponent and every caller agrees.
No component of the kind: ENODEV. Pure data; no FIT here.
"""

import errno
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

_ID = re.compile(r"([a-z]+)(\d*)")


def id_key(cid: str) -> tuple[str, int, str]:
    """Natural order of component ids: p2 before p10."""
    m = _ID.fullmatch(cid)
    return (m.group(1), int(m.group(2) or -1), cid) if m else (cid, -1, cid)


@dataclass
class Component:
    id: str
    kind: str
    address: str
    pid: int
    resources: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "address": self.address, "pid": self.pid,
                "resources": self.resources, "load": self.load}


_INITIAL_LOAD = {"p": {"processes": 0}, "m": {"used": 0}}


class Registry:
    def __init__(self) -> None:
        self.components: dict[str, Component] = {}

    def add(self, component: Component) -> None:
        component.load = dict(_INITIAL_LOAD.get(component.kind, {}))
        self.components[component.id] = component

    def get(self, cid: str) -> Component:
        component = self.components.get(cid)
        if component is None:
            raise OSError(errno.ENXIO, f"no component {cid!r} in this rack")
        return component

    def of_kind(self, kind: str) -> list[Component]:
        found = sorted((c for c in self.components.values() if c.kind == kind),
                       key=lambda c: id_key(c.id))
        if not found:
            raise OSError(errno.ENODEV, f"no {kind}Component registered")
        return found

    # GPM
    def place_process(self) -> str:
        chosen = min(self.of_kind("p"), key=lambda c: c.load["processes"])
        chosen.load["processes"] += 1
        return chosen.id

    # GMM
    def place_memory(self, size: int) -> str:
        if size <= 0:
            raise OSError(errno.EINVAL, f"size must be positive, not {size}")
        fits = [c for c in self.of_kind("m") if c.resources["memory"] - c.load["used"] >= size]
        if not fits:
            raise OSError(errno.ENOMEM, f"no mComponent has {size} bytes free")
        chosen = min(fits, key=lambda c: c.load["used"] / c.resources["memory"])
        chosen.load["used"] += size
        return chosen.id

    # GSM
    def storage_for(self, path: str) -> str:
        holders = self.of_kind("s")
        first = path.strip("/").split("/", 1)[0]
        return holders[zlib.crc32(first.encode()) % len(holders)].id
