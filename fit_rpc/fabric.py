"""The interconnect model: what a FIT message costs on the rack's fabric.

A rack spec's [fabric] (splitrack/spec.py, docs/rack.md) gives every link a
latency and a bandwidth, or each link class its own. The shm transport applies
it per ring (native/fitring.h, "The interconnect model"): a message is due
latency after the link has carried it at its bandwidth; the sender never
sleeps, the receiver does not take it before then.

Interface:
    fab = Fabric.of_run_dir(run_dir)   the rack's model (RUN_DIR/spec.json, key
                                       "fabric", as spec.to_json writes it), or None
    fab = Fabric(spec_json["fabric"])
    fab.model(a, b) -> Model | None    the cost of a message between ids a and b
    link_class(a, b) -> str | None     "p-m", "p-n", "n-m", "p-p", "p-s", another pair
                                       of kinds ("m-s", ...), or None: no fabric link
    Model(latency_ns, bytes_per_s)     bytes_per_s 0: no bandwidth limit

Which links cross the fabric: those between two of the rack's components (pN,
mN, nN, sN) or their processes (pN.PID counts as pN). Not: a process and its own
pComponent (pN.PID and pN, or two processes of pN: one board), links with
`global` (the managers' control plane) or with a client outside the rack
(cli.*). A class table ([fabric.p-m]) overrides [fabric]'s own keys for its
class; a link of a class with no table takes [fabric]'s own values, and none if
[fabric] has none.
"""

import json
import os
from functools import lru_cache
from typing import Any, NamedTuple

from fit_rpc.identity import kind_of, process_of

CLASSES = ("p-m", "p-n", "n-m", "p-p", "p-s")   # the spec's [fabric.CLASS] tables
_NAMES = {frozenset(name.split("-")): name for name in CLASSES}


class Model(NamedTuple):
    latency_ns: int
    bytes_per_s: int   # 0: no limit


def board_of(cid: str) -> str | None:
    """The component a FIT id runs on (pN.PID: pN), None if none of the rack's."""
    kind = kind_of(cid)
    if kind in ("p", "m", "n", "s"):
        return cid
    if kind == "process":
        return process_of(cid)[0]   # type: ignore[index]
    return None


def link_class(a: str, b: str) -> str | None:
    """The class of the link between ids a and b ("p-m", ...), None off the fabric."""
    x, y = board_of(a), board_of(b)
    if x is None or y is None or x == y:
        return None
    kinds = (x[0], y[0])
    return _NAMES.get(frozenset(kinds)) or "-".join(sorted(kinds))


class Fabric:
    """A rack's model, from its normalized spec form:
    {"latency_ns": int | None, "bytes_per_s": int | None,
     "links": {CLASS: {"latency_ns"?, "bytes_per_s"?}}}."""

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        own = {k: spec.get(k) for k in ("latency_ns", "bytes_per_s")}
        self.default = _model(own) if any(v is not None for v in own.values()) else None
        self.links = {name: _model({**own, **{k: v for k, v in table.items() if v is not None}})
                      for name, table in spec.get("links", {}).items()}

    def model(self, a: str, b: str) -> Model | None:
        name = link_class(a, b)
        if name is None:
            return None
        return self.links.get(name, self.default)

    @staticmethod
    def of_run_dir(run_dir: str) -> "Fabric | None":
        """The model of the rack whose run directory this is; None if it has none."""
        path = os.path.join(run_dir, "spec.json")
        try:
            st = os.stat(path)
        except OSError:
            return None
        return _load(path, st.st_ino, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _load(path: str, ino: int, mtime_ns: int) -> "Fabric | None":
    """(Cached by the file's identity: a rack restarted in the same run directory
    with another spec is read again.)"""
    try:
        with open(path) as f:
            spec = json.load(f).get("fabric")
    except (OSError, ValueError):
        return None
    return Fabric(spec) if spec else None


def _model(values: dict[str, Any]) -> Model:
    return Model(int(values.get("latency_ns") or 0), int(values.get("bytes_per_s") or 0))
