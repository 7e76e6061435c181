"""The global process's component registry and LegoOS's placement policies.

GPM, GMM and GSM are views of one registry of components (id, kind, address,
pid, resources, load). GPM and GMM choose among the components a caller may
use (`among`: its slice's, monitors/slices.py; None: all):
- GPM.place(count, placement, hints)   `count` pComponents, one a process, by
                   Scylla's policies; each placement counts as load until the
                   pMonitor reports:
      least-loaded  each process on the least-loaded one (fewest processes;
                    ties: lowest id);
      pack          on as few as fit, `cores` processes each (Registry(cores)),
                    the emptiest first, so their sockets take the pipe shortcut;
                    what does not fit goes least-loaded;
      spread        one on each, least-loaded first; round-robin past them all;
      auto          pack for a network-heavy job (hints.network and neither
                    hints.cpu nor hints.memory), else spread.
- GMM.place(size)  an mComponent that still has `size` bytes free; the bytes
                   are reserved. ENOMEM if none. By `gmm_policy` (rack.gmm_policy):
      least-used    the least-used one (used/total);
      fewest-misses LegoOS's default: the one that has served the fewest misses
                    (its load reports count them), kept for GMM_RECHOOSE requests,
                    then chosen again (or sooner, once it has no room).
- GSM.lookup(path) the sComponent that holds `path`: a stable hash of the
                   path's first component over the sComponents, so a directory
                   tree stays on one sComponent and every caller agrees.
No component of the kind (among those allowed): ENODEV; a bad placement or
count: EINVAL. Pure data; no FIT here.
"""

import errno
import re
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from splitrack.params import CORES_DEFAULT, GMM_POLICIES, GMM_RECHOOSE

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
PLACEMENTS = ("least-loaded", "pack", "spread", "auto")
PLACE_MAX = 4096       # processes one GPM_PLACE may place


class Registry:
    def __init__(self, cores: dict[str, int] | None = None,
                 gmm_policy: str = "least-used") -> None:
        if gmm_policy not in GMM_POLICIES:
            raise ValueError(f"gmm_policy {gmm_policy!r} is not one of {GMM_POLICIES}")
        self.components: dict[str, Component] = {}
        self.cores = cores or {}   # pComponent -> processes "pack" puts there (spec: cores)
        self.gmm_policy = gmm_policy
        self._gmm_choice: dict[frozenset[str], tuple[str, int]] = {}   # fewest-misses: the
        #                     candidates -> (the mComponent chosen, requests it serves yet)

    def add(self, component: Component) -> None:
        component.load = dict(_INITIAL_LOAD.get(component.kind, {}))
        self.components[component.id] = component

    def get(self, cid: str) -> Component:
        component = self.components.get(cid)
        if component is None:
            raise OSError(errno.ENXIO, f"no component {cid!r} in this rack")
        return component

    def of_kind(self, kind: str, among: Collection[str] | None = None,
                where: str = "registered") -> list[Component]:
        """The components of a kind (those in `among`, if given), in natural order."""
        found = sorted((c for c in self.components.values() if c.kind == kind
                        and (among is None or c.id in among)), key=lambda c: id_key(c.id))
        if not found:
            raise OSError(errno.ENODEV, f"no {kind}Component {where}")
        return found

    # GPM
    def place_process(self) -> str:
        return self.place_processes()[0]

    def place_processes(self, count: int = 1, placement: str = "least-loaded",
                        hints: dict[str, bool] | None = None,
                        among: Collection[str] | None = None,
                        where: str = "registered") -> list[str]:
        if placement not in PLACEMENTS:
            raise OSError(errno.EINVAL, f"placement {placement!r} is not one of "
                                        f"{', '.join(PLACEMENTS)}")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= PLACE_MAX:
            raise OSError(errno.EINVAL, f"count {count!r} is not an integer in 1..{PLACE_MAX}")
        candidates = self.of_kind("p", among, where)
        if placement == "auto":
            hints = hints or {}
            placement = "pack" if hints.get("network") and not (
                hints.get("cpu") or hints.get("memory")) else "spread"
        chosen = (self._pack(candidates, count) if placement == "pack" else
                  _spread(candidates, count) if placement == "spread" else [])
        while len(chosen) < count:   # least-loaded, and what "pack" could not fit
            chosen.append(min(candidates, key=lambda c: c.load["processes"]))
            chosen[-1].load["processes"] += 1
        return [c.id for c in chosen]

    def _pack(self, candidates: list[Component], count: int) -> list[Component]:
        """Fill the emptiest pComponents first, `cores` processes each (ties: lowest id)."""
        chosen: list[Component] = []
        for c in sorted(candidates, key=lambda c: c.load["processes"]):
            room = max(0, self.cores.get(c.id, CORES_DEFAULT) - c.load["processes"])
            take = min(room, count - len(chosen))
            c.load["processes"] += take
            chosen += [c] * take
        return chosen

    # GMM
    def place_memory(self, size: int, among: Collection[str] | None = None,
                     where: str = "registered") -> str:
        if size <= 0:
            raise OSError(errno.EINVAL, f"size must be positive, not {size}")
        candidates = self.of_kind("m", among, where)
        fits = [c for c in candidates if c.resources["memory"] - c.load["used"] >= size]
        if not fits:
            raise OSError(errno.ENOMEM, f"no mComponent has {size} bytes free")
        if self.gmm_policy == "fewest-misses":
            chosen = self._fewest_misses(frozenset(c.id for c in candidates), fits)
        else:
            chosen = min(fits, key=lambda c: c.load["used"] / c.resources["memory"])
        chosen.load["used"] += size
        return chosen.id

    def _fewest_misses(self, key: frozenset[str], fits: list[Component]) -> Component:
        """LegoOS's GMM: its last choice among these candidates while it serves requests
        yet and has room; else the one that served the fewest misses (ties: lowest id)."""
        last, left = self._gmm_choice.get(key, ("", 0))
        chosen = next((c for c in fits if c.id == last), None) if left > 0 else None
        if chosen is None:
            chosen, left = min(fits, key=lambda c: c.load.get("misses", 0)), GMM_RECHOOSE
        self._gmm_choice[key] = (chosen.id, left - 1)
        return chosen

    # GSM
    def storage_for(self, path: str) -> str:
        holders = self.of_kind("s")
        first = path.strip("/").split("/", 1)[0]
        return holders[zlib.crc32(first.encode()) % len(holders)].id


def _spread(candidates: list[Component], count: int) -> list[Component]:
    """One on each, least-loaded first (ties: lowest id), round-robin past them all."""
    order = sorted(candidates, key=lambda c: c.load["processes"])
    chosen = [order[i % len(order)] for i in range(count)]
    for c in chosen:
        c.load["processes"] += 1
    return chosen
