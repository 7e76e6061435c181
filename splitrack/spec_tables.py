"""Validation of each table of a rack spec on its own: [rack], [fabric], and one
entry of [[pcomponent]], [[mcomponent]], [[ncomponent]] or [[scomponent]].

Interface (for load_spec, spec.py):
    check_rack_section(data["rack"])           the rack keys, defaults filled in, normalized
    check_component(entry, kind, where, base)  one component's record: {"id", "kind", ...}
    check_fabric(data["fabric"])               [fabric] in fit_rpc/fabric.py's form
    RACK_KEYS, SECTIONS, _FIELDS        the keys each table may have (rack's: defaults)

Each raises BadField(where, problem) (spec_values.py) at the first unknown key, missing
field or bad value. What needs more than one table (an id used twice, a NIC of two
nComponents, a pComponent's nic, rack.split_cpus) is the whole rack's: spec.py.
"""

import os
import re
from typing import Any

from fit_rpc.fabric import CLASSES as LINK_CLASSES
from fit_rpc.params import FIT_POLL_US
from gnm import POLICIES as NIC_POLICIES
from splitrack.params import (
    CORES_DEFAULT,
    GMM_POLICIES,
    NCOMPONENT_DRAM_DEFAULT,
    NCOMPONENT_DRAM_MIN_BYTES,
    VICTIM_MAX,
)
from splitrack.spec_values import (
    BadField,
    field_bandwidth,
    field_cpus,
    field_ip,
    field_loopback,
    field_nics,
    field_positive_int,
    field_size,
    field_time_ns,
)

RACK_KEYS = {"name": "default", "transport": "shm", "poll_us": FIT_POLL_US, "endpoints": "ipc",
              "mode": "ddio", "shortcuts": True, "line": 4096, "nic_policy": "round-robin",
              "loopback": "127.0.0.10", "gmm_policy": "least-used", "split_cpus": False}
_POLL_US_MAX = 100_000
SECTIONS = {"pcomponent": "p", "mcomponent": "m", "ncomponent": "n", "scomponent": "s"}
_FIELDS = {  # per kind: field -> required
    "p": {"id": True, "extcache": True, "ways": True, "eviction": False, "victim": False,
          "nic": False, "cpus": False, "cores": False},
    "m": {"id": True, "memory": True},
    "n": {"id": True, "nics": True, "dram": False, "cpus": False},
    "s": {"id": True, "root": True},
}
LATENCY_MAX_NS = 10**9          # [fabric] latency: at most 1 s (a FIT call waits 5 s)


def check_rack_section(section: Any) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise BadField("rack", "must be a table")
    for key in section:
        if key not in RACK_KEYS:
            raise BadField(f"rack.{key}", f"unknown key (expected {', '.join(RACK_KEYS)})")
    rack = {**RACK_KEYS, **section}
    _choice(rack, "transport", ("shm", "zmq", "verbs"))
    if rack["transport"] == "verbs":
        raise BadField("rack.transport", "'verbs' is not available in this build "
                   "(needs pyverbs and RDMA hardware); use 'shm' or 'zmq'")
    _choice(rack, "endpoints", ("ipc", "tcp"))
    if rack["endpoints"] == "tcp" and rack["transport"] != "zmq":
        raise BadField("rack.endpoints", "'tcp' is a ZeroMQ endpoint: it needs transport = 'zmq'")
    poll = rack["poll_us"]
    if not isinstance(poll, int) or isinstance(poll, bool) or not 0 <= poll <= _POLL_US_MAX:
        raise BadField("rack.poll_us", f"{poll!r} is not an integer in 0..{_POLL_US_MAX} "
                   "(microseconds a waiter spins before it sleeps)")
    _choice(rack, "mode", ("dma", "ddio"))
    for key in ("shortcuts", "split_cpus"):
        if not isinstance(rack[key], bool):
            raise BadField(f"rack.{key}", f"must be true or false, not {rack[key]!r}")
    if not isinstance(rack["name"], str):
        raise BadField("rack.name", "must be a string")
    _choice(rack, "nic_policy", NIC_POLICIES)
    _choice(rack, "gmm_policy", GMM_POLICIES)
    rack["loopback"] = field_loopback(rack["loopback"])
    rack["line"] = field_size(rack["line"], "rack.line")
    if rack["line"] & (rack["line"] - 1) or not 512 <= rack["line"] <= 65536:
        raise BadField("rack.line", f"{rack['line']} is not a power of two in 512..65536 bytes")
    return rack


def _choice(rack: dict[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    if rack[key] not in allowed:
        raise BadField(f"rack.{key}", f"{rack[key]!r} is not one of {', '.join(allowed)}")


def check_component(entry: Any, kind: str, where: str, base: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise BadField(where, "must be a table")
    fields = _FIELDS[kind]
    for key in entry:
        if key not in fields:
            raise BadField(f"{where}.{key}", f"unknown key (expected {', '.join(fields)})")
    for key, required in fields.items():
        if required and key not in entry:
            raise BadField(f"{where}.{key}", "missing")
    cid = entry["id"]
    if not isinstance(cid, str) or not re.fullmatch(kind + r"\d{1,4}", cid):
        raise BadField(f"{where}.id", f"{cid!r} is not {kind}<number> (e.g. {kind}0)")
    out: dict[str, Any] = {"id": cid, "kind": kind}
    if kind == "p":
        out["extcache"] = field_size(entry["extcache"], f"{where}.extcache")
        out["ways"] = field_positive_int(entry["ways"], f"{where}.ways")
        out["eviction"] = entry.get("eviction", "lru")
        if out["eviction"] not in ("lru", "fifo"):
            raise BadField(f"{where}.eviction", f"{out['eviction']!r} is not one of lru, fifo")
        out["victim"] = entry.get("victim", 0)   # victim-cache entries (LegoOS: 8)
        if not isinstance(out["victim"], int) or isinstance(out["victim"], bool) or \
                not 0 <= out["victim"] <= VICTIM_MAX:
            raise BadField(f"{where}.victim", f"{out['victim']!r} is not a number of victim-cache "
                       f"entries (0..{VICTIM_MAX}; 0: none)")
        out["nic"] = field_ip(entry["nic"], f"{where}.nic") if "nic" in entry else None
        out["cores"] = field_positive_int(entry.get("cores", CORES_DEFAULT), f"{where}.cores")
        out["cpus"] = field_cpus(entry["cpus"], f"{where}.cpus") if "cpus" in entry else None
    elif kind == "m":
        out["memory"] = field_size(entry["memory"], f"{where}.memory")
    elif kind == "n":
        out["nics"] = field_nics(entry["nics"], f"{where}.nics")
        out["dram"] = field_size(entry.get("dram", NCOMPONENT_DRAM_DEFAULT), f"{where}.dram")
        if out["dram"] < NCOMPONENT_DRAM_MIN_BYTES:
            raise BadField(f"{where}.dram", f"{out['dram']} B is less than 1MiB")
        out["cpus"] = field_cpus(entry["cpus"], f"{where}.cpus") if "cpus" in entry else None
    else:
        root = entry["root"]
        if not isinstance(root, str) or not root:
            raise BadField(f"{where}.root", "must be a non-empty path string")
        out["root"] = os.path.abspath(os.path.join(base, os.path.expanduser(root)))
    return out


def check_fabric(section: Any) -> dict[str, Any]:
    """[fabric] in fit_rpc/fabric.py's form: its own latency_ns and bytes_per_s (None:
    not set), and "links": {CLASS: the same, of [fabric.CLASS]}."""
    if not isinstance(section, dict):
        raise BadField("fabric", "must be a table ([fabric])")
    links = {}
    for key, value in section.items():
        if key in LINK_CLASSES:
            if not isinstance(value, dict):
                raise BadField(f"fabric.{key}", f"must be a table ([fabric.{key}])")
            links[key] = _link_model(value, f"fabric.{key}")
        elif key not in ("latency", "bandwidth"):
            raise BadField(f"fabric.{key}", "unknown key (expected latency, bandwidth, or a "
                       f"link class table: {', '.join(LINK_CLASSES)})")
    own = {k: v for k, v in section.items() if k in ("latency", "bandwidth")}
    if not own and not links:
        raise BadField("fabric", "sets no latency, bandwidth or link class")
    return {**(_link_model(own, "fabric") if own else
               {"latency_ns": None, "bytes_per_s": None}), "links": links}


def _link_model(table: dict[str, Any], where: str) -> dict[str, int | None]:
    for key in table:
        if key not in ("latency", "bandwidth"):
            raise BadField(f"{where}.{key}", "unknown key (expected latency, bandwidth)")
    if not table:
        raise BadField(where, "sets neither latency nor bandwidth")
    latency = field_time_ns(table["latency"], f"{where}.latency") if "latency" in table else None
    if latency is not None and latency > LATENCY_MAX_NS:
        raise BadField(f"{where}.latency", f"{table['latency']!r} is more than 1s")
    rate = (field_bandwidth(table["bandwidth"], f"{where}.bandwidth") if "bandwidth" in table
            else None)
    return {"latency_ns": latency, "bytes_per_s": rate}
