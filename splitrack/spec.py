"""The rack spec: a TOML file that says which components a rack has.

Interface:
    load_spec(None)              the embedded default rack (default_rack.toml)
    load_spec(None, embedded="slices")   the embedded shared rack (slices_rack.toml)
    load_spec("rack.toml")       a spec file; relative paths inside it are
                                 relative to the file's directory
    load_spec({...})             a dict of the same shape (Python API)
    default_spec()               same as load_spec(None)
    spec.to_json()               the normalized form monitors read (spec.json)

A spec is pure data (Mininet's topology): nothing here starts anything.
Validation names the bad field in one line, e.g.
    SpecError: rack.toml: ncomponent[0].nics[1]: '127.0.0.300' is not an IPv4 address
Sizes are bytes (int) or strings with a unit: "64MiB", "1GiB", "512KB".

Interconnect keys: rack.transport ("shm": FIT over shared-memory rings, the
default; "zmq": over ZeroMQ, for comparison and across hosts), rack.poll_us
(how long a FIT waiter spins before it sleeps; 0: never), rack.endpoints
("ipc" or "tcp": where ZeroMQ inboxes are bound; tcp needs transport "zmq").

The interconnect model, [fabric] (none: FIT costs what this host's shared
memory costs): `latency` ("0", "500ns", "2us", "1.5ms") and `bandwidth`
("40Gbps", "10Gbit/s", "5GB/s"; bits unless the unit is B/s) for every link
between components, or per link class in [fabric.p-m], [fabric.p-n],
[fabric.n-m], [fabric.p-p], [fabric.p-s], whose keys override [fabric]'s for
that class (fit_rpc/fabric.py says which links are which). Needs transport "shm".
    parse_time_ns("2us") -> 2000       parse_bandwidth("40Gbps") -> 5000000000 (B/s)

Memory key: rack.gmm_policy (how GMM picks the home mComponent of a new region:
"least-used", the default, or "fewest-misses", LegoOS's; monitors/registry.py).

Network keys: rack.nic_policy (how GNM picks a NIC for a process's unbound
sockets, docs/gnm.md), rack.loopback (the alias in 127.0.0.0/8 on which an
nComponent serves the rack's 127.0.0.1), pcomponent.nic (that pComponent's
NIC; required for every pComponent under nic_policy "explicit"),
ncomponent.dram (its DRAM for socket buffers).

Placement keys: pcomponent.cpus (the host CPUs its programs are pinned to,
e.g. [0]), ncomponent.cpus (the host CPUs its nMonitor runs on), rack.split_cpus
(false, the default: the host's scheduler places what no cpus pin; true: when
no component names cpus and the host lets us use two CPUs or more, each
nComponent gets the first of them and each pComponent's programs the others;
docs/rack.md says what each costs), pcomponent.cores (how many processes
GPM's "pack" puts on it, default 4; a placement capacity for slices,
monitors/slices.py, independent of cpus).
"""

import ipaddress
import os
import re
import socket
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import psutil

from fit_rpc.fabric import CLASSES as LINK_CLASSES
from gnm import POLICIES as NIC_POLICIES
from splitrack.params import (
    CORES_DEFAULT,
    FIT_POLL_US,
    GMM_POLICIES,
    NCOMPONENT_DRAM_DEFAULT,
    NCOMPONENT_DRAM_MIN_BYTES,
    VICTIM_MAX,
)

_RACK_KEYS = {"name": "default", "transport": "shm", "poll_us": FIT_POLL_US, "endpoints": "ipc",
              "mode": "ddio", "shortcuts": True, "line": 4096, "nic_policy": "round-robin",
              "loopback": "127.0.0.10", "gmm_policy": "least-used", "split_cpus": False}
_POLL_US_MAX = 100_000
_SECTIONS = {"pcomponent": "p", "mcomponent": "m", "ncomponent": "n", "scomponent": "s"}
_FIELDS = {  # per kind: field -> required
    "p": {"id": True, "extcache": True, "ways": True, "eviction": False, "victim": False,
          "nic": False, "cpus": False, "cores": False},
    "m": {"id": True, "memory": True},
    "n": {"id": True, "nics": True, "dram": False, "cpus": False},
    "s": {"id": True, "root": True},
}
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)\s*")
_TIME_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKMGT]?)(bps|bit/s|B/s)\s*")
_RATE_PREFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
LATENCY_MAX_NS = 10**9          # [fabric] latency: at most 1 s (a FIT call waits 5 s)
BANDWIDTH_MIN_BYTES_S = 125_000  # [fabric] bandwidth: at least 1 Mbit/s
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")   # rack.name
_BAD_NAME = "{!r} is not 1-32 of [a-z0-9_-], starting with a letter or digit"
RACK_LOOPBACK = "127.0.0.1"


class SpecError(ValueError):
    """The rack spec is not valid; the message names the source and the field."""


@dataclass
class RackSpec:
    name: str
    transport: str
    poll_us: int
    endpoints: str
    mode: str
    shortcuts: bool
    line: int
    nic_policy: str
    loopback: str
    gmm_policy: str
    split_cpus: bool
    components: list[dict[str, Any]] = field(default_factory=list)
    fabric: dict[str, Any] | None = None   # the interconnect model (fit_rpc/fabric.py's form)
    source: str = "<embedded default>"

    def ids(self) -> list[str]:
        return [c["id"] for c in self.components]

    def to_json(self) -> dict[str, Any]:
        rack = {k: getattr(self, k) for k in _RACK_KEYS}
        out = {"rack": rack, "components": [{"id": "global", "kind": "global"}, *self.components]}
        if self.fabric is not None:
            out["fabric"] = self.fabric
        return out


def default_spec() -> RackSpec:
    return load_spec(None)


def load_spec(source: str | os.PathLike | dict | None = None, *,
              name: str | None = None, embedded: str = "default") -> RackSpec:
    """Read and validate a spec; `name` overrides rack.name. source None: the
    embedded spec `embedded` (splitrack/<embedded>_rack.toml: "default", or
    "slices", the shared rack of the slices benchmarks)."""
    if source is None:
        text = resources.files("splitrack").joinpath(f"{embedded}_rack.toml").read_text()
        data, label, base = tomllib.loads(text), f"<embedded {embedded}>", None
    elif isinstance(source, dict):
        data, label, base = source, "<dict>", os.getcwd()
    else:
        label = os.fspath(source)
        try:
            with open(label, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise SpecError(f"{label}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"{label}: not valid TOML: {exc}") from None
        except UnicodeDecodeError as exc:
            raise SpecError(f"{label}: not UTF-8 text (at byte offset {exc.start})") from None
        base = os.path.dirname(os.path.abspath(label))
    try:
        return _validate(data, label, base, name)
    except _Bad as bad:
        raise SpecError(f"{label}: {bad.where}: {bad.problem}") from None


class _Bad(Exception):
    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem


def _validate(data: dict, label: str, base: str | None, name: str | None) -> RackSpec:
    for key in data:
        if key not in ("rack", "fabric") and key not in _SECTIONS:
            raise _Bad(key, f"unknown section (expected rack, fabric, {', '.join(_SECTIONS)})")
    rack = _rack_section(data.get("rack", {}))
    fabric = _fabric(data["fabric"]) if "fabric" in data else None
    if fabric is not None and rack["transport"] != "shm":
        raise _Bad("fabric", f"needs rack.transport 'shm' (the {rack['transport']} transport "
                   "applies no interconnect model)")
    if base is None:  # embedded default: storage lives in the user's data dir, by spec name
        data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        base = os.path.join(data_home, "splitrack", rack["name"])
    if name is not None:
        rack["name"] = name
    if not NAME.fullmatch(rack["name"]):
        raise _Bad("rack.name", _BAD_NAME.format(rack["name"]))
    spec = RackSpec(**rack, fabric=fabric, source=label)
    for section, kind in _SECTIONS.items():
        entries = data.get(section, [])
        if not isinstance(entries, list):
            raise _Bad(section, f"must be an array of tables ([[{section}]])")
        for i, entry in enumerate(entries):
            spec.components.append(_component(entry, kind, f"{section}[{i}]", base))
    _check_rack(spec)
    _split_cpus(spec)
    for comp in spec.components:
        if comp["kind"] == "p" and comp["extcache"] < comp["ways"] * spec.line:
            raise _Bad(f"{comp['id']}.extcache", f"{comp['extcache']} B cannot hold one set of "
                       f"{comp['ways']} lines of {spec.line} B")
    return spec


def _rack_section(section: Any) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise _Bad("rack", "must be a table")
    for key in section:
        if key not in _RACK_KEYS:
            raise _Bad(f"rack.{key}", f"unknown key (expected {', '.join(_RACK_KEYS)})")
    rack = {**_RACK_KEYS, **section}
    _choice(rack, "transport", ("shm", "zmq", "verbs"))
    if rack["transport"] == "verbs":
        raise _Bad("rack.transport", "'verbs' is not available in this build "
                   "(needs pyverbs and RDMA hardware); use 'shm' or 'zmq'")
    _choice(rack, "endpoints", ("ipc", "tcp"))
    if rack["endpoints"] == "tcp" and rack["transport"] != "zmq":
        raise _Bad("rack.endpoints", "'tcp' is a ZeroMQ endpoint: it needs transport = 'zmq'")
    poll = rack["poll_us"]
    if not isinstance(poll, int) or isinstance(poll, bool) or not 0 <= poll <= _POLL_US_MAX:
        raise _Bad("rack.poll_us", f"{poll!r} is not an integer in 0..{_POLL_US_MAX} "
                   "(microseconds a waiter spins before it sleeps)")
    _choice(rack, "mode", ("dma", "ddio"))
    for key in ("shortcuts", "split_cpus"):
        if not isinstance(rack[key], bool):
            raise _Bad(f"rack.{key}", f"must be true or false, not {rack[key]!r}")
    if not isinstance(rack["name"], str):
        raise _Bad("rack.name", "must be a string")
    _choice(rack, "nic_policy", NIC_POLICIES)
    _choice(rack, "gmm_policy", GMM_POLICIES)
    rack["loopback"] = _loopback(rack["loopback"])
    rack["line"] = _size(rack["line"], "rack.line")
    if rack["line"] & (rack["line"] - 1) or not 512 <= rack["line"] <= 65536:
        raise _Bad("rack.line", f"{rack['line']} is not a power of two in 512..65536 bytes")
    return rack


def _choice(rack: dict[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    if rack[key] not in allowed:
        raise _Bad(f"rack.{key}", f"{rack[key]!r} is not one of {', '.join(allowed)}")


def _component(entry: Any, kind: str, where: str, base: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise _Bad(where, "must be a table")
    fields = _FIELDS[kind]
    for key in entry:
        if key not in fields:
            raise _Bad(f"{where}.{key}", f"unknown key (expected {', '.join(fields)})")
    for key, required in fields.items():
        if required and key not in entry:
            raise _Bad(f"{where}.{key}", "missing")
    cid = entry["id"]
    if not isinstance(cid, str) or not re.fullmatch(kind + r"\d{1,4}", cid):
        raise _Bad(f"{where}.id", f"{cid!r} is not {kind}<number> (e.g. {kind}0)")
    out: dict[str, Any] = {"id": cid, "kind": kind}
    if kind == "p":
        out["extcache"] = _size(entry["extcache"], f"{where}.extcache")
        out["ways"] = _positive_int(entry["ways"], f"{where}.ways")
        out["eviction"] = entry.get("eviction", "lru")
        if out["eviction"] not in ("lru", "fifo"):
            raise _Bad(f"{where}.eviction", f"{out['eviction']!r} is not one of lru, fifo")
        out["victim"] = entry.get("victim", 0)   # victim-cache entries (LegoOS: 8)
        if not isinstance(out["victim"], int) or isinstance(out["victim"], bool) or \
                not 0 <= out["victim"] <= VICTIM_MAX:
            raise _Bad(f"{where}.victim", f"{out['victim']!r} is not a number of victim-cache "
                       f"entries (0..{VICTIM_MAX}; 0: none)")
        out["nic"] = _ip(entry["nic"], f"{where}.nic") if "nic" in entry else None
        out["cores"] = _positive_int(entry.get("cores", CORES_DEFAULT), f"{where}.cores")
        out["cpus"] = _cpus(entry["cpus"], f"{where}.cpus") if "cpus" in entry else None
    elif kind == "m":
        out["memory"] = _size(entry["memory"], f"{where}.memory")
    elif kind == "n":
        out["nics"] = _nics(entry["nics"], f"{where}.nics")
        out["dram"] = _size(entry.get("dram", NCOMPONENT_DRAM_DEFAULT), f"{where}.dram")
        if out["dram"] < NCOMPONENT_DRAM_MIN_BYTES:
            raise _Bad(f"{where}.dram", f"{out['dram']} B is less than 1MiB")
        out["cpus"] = _cpus(entry["cpus"], f"{where}.cpus") if "cpus" in entry else None
    else:
        root = entry["root"]
        if not isinstance(root, str) or not root:
            raise _Bad(f"{where}.root", "must be a non-empty path string")
        out["root"] = os.path.abspath(os.path.join(base, os.path.expanduser(root)))
    return out


def check_name(name: str) -> str:
    """A rack name as rack.name allows it (it names a directory of the run root)."""
    if not NAME.fullmatch(name):
        raise SpecError(f"rack name {_BAD_NAME.format(name)}")
    return name


def parse_size(value: Any, where: str = "size") -> int:
    """Bytes from an int or a string such as '64MB' or '1GiB'; SpecError if not a size."""
    try:
        return _size(value, where)
    except _Bad as bad:
        raise SpecError(f"{bad.where}: {bad.problem}") from None


def _size(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value)) and m.group(2).upper() in _UNITS:
        n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    else:
        raise _Bad(where, f"{value!r} is not a size (bytes, or e.g. '64MiB', '1GiB')")
    if n <= 0:
        raise _Bad(where, f"{value!r} must be positive")
    return n


def _fabric(section: Any) -> dict[str, Any]:
    """[fabric] in fit_rpc/fabric.py's form: its own latency_ns and bytes_per_s (None:
    not set), and "links": {CLASS: the same, of [fabric.CLASS]}."""
    if not isinstance(section, dict):
        raise _Bad("fabric", "must be a table ([fabric])")
    links = {}
    for key, value in section.items():
        if key in LINK_CLASSES:
            if not isinstance(value, dict):
                raise _Bad(f"fabric.{key}", f"must be a table ([fabric.{key}])")
            links[key] = _link_model(value, f"fabric.{key}")
        elif key not in ("latency", "bandwidth"):
            raise _Bad(f"fabric.{key}", "unknown key (expected latency, bandwidth, or a "
                       f"link class table: {', '.join(LINK_CLASSES)})")
    own = {k: v for k, v in section.items() if k in ("latency", "bandwidth")}
    if not own and not links:
        raise _Bad("fabric", "sets no latency, bandwidth or link class")
    return {**(_link_model(own, "fabric") if own else
               {"latency_ns": None, "bytes_per_s": None}), "links": links}


def _link_model(table: dict[str, Any], where: str) -> dict[str, int | None]:
    for key in table:
        if key not in ("latency", "bandwidth"):
            raise _Bad(f"{where}.{key}", "unknown key (expected latency, bandwidth)")
    if not table:
        raise _Bad(where, "sets neither latency nor bandwidth")
    latency = _time_ns(table["latency"], f"{where}.latency") if "latency" in table else None
    if latency is not None and latency > LATENCY_MAX_NS:
        raise _Bad(f"{where}.latency", f"{table['latency']!r} is more than 1s")
    rate = _bandwidth(table["bandwidth"], f"{where}.bandwidth") if "bandwidth" in table else None
    return {"latency_ns": latency, "bytes_per_s": rate}


def parse_time_ns(value: Any, where: str = "time") -> int:
    """Nanoseconds from 0 or a string such as '500ns', '2us', '1.5ms'; SpecError if not."""
    try:
        return _time_ns(value, where)
    except _Bad as bad:
        raise SpecError(f"{bad.where}: {bad.problem}") from None


def parse_bandwidth(value: Any, where: str = "bandwidth") -> int:
    """Bytes a second from a string such as '40Gbps', '10Gbit/s' (bits), '5GB/s' (bytes)."""
    try:
        return _bandwidth(value, where)
    except _Bad as bad:
        raise SpecError(f"{bad.where}: {bad.problem}") from None


def _time_ns(value: Any, where: str) -> int:
    if value == 0 and not isinstance(value, bool) or value == "0":
        return 0
    m = _TIME.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise _Bad(where, f"{value!r} is not a time (0, or e.g. '500ns', '2us', '1.5ms')")
    return round(float(m.group(1)) * _TIME_NS[m.group(2)])


def _bandwidth(value: Any, where: str) -> int:
    m = _RATE.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise _Bad(where, f"{value!r} is not a bandwidth (e.g. '40Gbps', '10Gbit/s', "
                   "'5GB/s')")
    number, prefix, unit = m.groups()
    rate = float(number) * _RATE_PREFIX[prefix] / (1 if unit == "B/s" else 8)
    if rate < BANDWIDTH_MIN_BYTES_S:
        raise _Bad(where, f"{value!r} is less than 1Mbps")
    return round(rate)


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise _Bad(where, f"{value!r} is not a positive integer")
    return value


def _cpus(value: Any, where: str) -> list[int]:
    """Host CPU numbers, each one this process may run on (sched_getaffinity)."""
    if not isinstance(value, list) or not value:
        raise _Bad(where, "must be a non-empty list of host CPU numbers, e.g. [0]")
    host = os.sched_getaffinity(0)
    for i, cpu in enumerate(value):
        if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
            raise _Bad(f"{where}[{i}]", f"{cpu!r} is not a CPU number (an integer >= 0)")
        if cpu not in host:
            raise _Bad(f"{where}[{i}]", f"no CPU {cpu} on this host (it has "
                       f"{', '.join(map(str, sorted(host)))})")
    return sorted(set(value))


def _split_cpus(spec: RackSpec) -> None:
    """rack.split_cpus: nComponents on the host's first CPU, pComponents' programs
    on the others. A program and the nComponent that carries its bytes then never
    share a CPU, and a host program talking to the rack tends to join the
    nComponent's (Linux wakes a task where its waker runs when that CPU is free
    enough): the DDIO echo then depends far less on where the kernel put the
    three processes. On two CPUs, though, all programs then share one, and two rack
    programs talking through a shortcut take turns on it (docs/rack.md). A spec
    that pins anything itself is left as written."""
    host = sorted(os.sched_getaffinity(0))
    kinds = {"n": host[:1], "p": host[1:]}
    if not spec.split_cpus or len(host) < 2 or \
            any(c.get("cpus") for c in spec.components):
        return
    for comp in spec.components:
        if comp["kind"] in kinds:
            comp["cpus"] = kinds[comp["kind"]]


def _nics(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _Bad(where, "must be a non-empty list of IPv4 addresses")
    nics, host = [], None
    for i, ip in enumerate(value):
        nics.append(_ip(ip, f"{where}[{i}]"))
        if nics[-1] == RACK_LOOPBACK:
            raise _Bad(f"{where}[{i}]", "127.0.0.1 is the rack's own loopback, not a NIC")
        if not ipaddress.IPv4Address(nics[-1]).is_loopback:
            host = _host_ips() if host is None else host   # asked once, if needed at all
            if nics[-1] not in host:
                raise _Bad(f"{where}[{i}]", f"{nics[-1]} is not an address of this host "
                                            "(a NIC binds there: 127.0.0.0/8 or an interface's)")
    return nics


def _host_ips() -> set[str]:
    """The IPv4 addresses of this host's interfaces."""
    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET}


def _ip(value: Any, where: str) -> str:
    if not isinstance(value, str):  # IPv4Address would take an int
        raise _Bad(where, f"{value!r} is not an IPv4 address")
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise _Bad(where, f"{value!r} is not an IPv4 address") from None


def _loopback(value: Any) -> str:
    ip = _ip(value, "rack.loopback")
    if ip == RACK_LOOPBACK or not ipaddress.IPv4Address(ip).is_loopback:
        raise _Bad("rack.loopback", f"{ip} is not an address of 127.0.0.0/8 other than 127.0.0.1")
    return ip


def _check_rack(spec: RackSpec) -> None:
    seen: dict[str, str] = {}
    nic_owner: dict[str, str] = {}
    for comp in spec.components:
        if comp["id"] in seen:
            raise _Bad(comp["id"], "component id used twice")
        seen[comp["id"]] = comp["kind"]
        for ip in comp.get("nics", ()):
            if ip in nic_owner:
                raise _Bad(f"{comp['id']}.nics", f"{ip} is also a NIC of {nic_owner[ip]}")
            nic_owner[ip] = comp["id"]
    for kind, label in (("p", "pcomponent"), ("m", "mcomponent")):
        if kind not in seen.values():
            raise _Bad(label, f"a rack needs at least one {label}")
    if spec.loopback in nic_owner:
        raise _Bad("rack.loopback", f"{spec.loopback} is a NIC of {nic_owner[spec.loopback]}")
    _check_pcomponent_nics(spec, nic_owner)


def _check_pcomponent_nics(spec: RackSpec, nic_owner: dict[str, str]) -> None:
    for comp in spec.components:
        if comp["kind"] != "p":
            continue
        if comp["nic"] is None and spec.nic_policy == "explicit":
            raise _Bad(f"{comp['id']}.nic", "missing (rack.nic_policy is 'explicit')")
        if comp["nic"] is not None and comp["nic"] not in nic_owner:
            raise _Bad(f"{comp['id']}.nic", f"{comp['nic']} is not a NIC of any ncomponent")
