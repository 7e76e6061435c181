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

Where it is done: this module reads the source, puts the tables together into a
RackSpec and checks what spans tables (component ids, NICs, rack.split_cpus);
spec_tables.py validates each table on its own; spec_values.py each field's
value (sizes, times, bandwidths, addresses, CPUs), and defines SpecError. Their
public names are importable from here (__all__).

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

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from splitrack.spec_tables import (
    LATENCY_MAX_NS,
    RACK_KEYS,
    SECTIONS,
    check_component,
    check_fabric,
    check_rack_section,
)
from splitrack.spec_values import (
    BAD_NAME,
    BANDWIDTH_MIN_BYTES_S,
    NAME,
    RACK_LOOPBACK,
    BadField,
    SpecError,
    check_name,
    parse_bandwidth,
    parse_size,
    parse_time_ns,
)

__all__ = ["BANDWIDTH_MIN_BYTES_S", "LATENCY_MAX_NS", "NAME", "RACK_LOOPBACK", "RackSpec",
           "SpecError", "check_name", "default_spec", "load_spec", "parse_bandwidth",
           "parse_size", "parse_time_ns"]


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
        rack = {k: getattr(self, k) for k in RACK_KEYS}
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
    except BadField as bad:
        raise SpecError(f"{label}: {bad.where}: {bad.problem}") from None


def _validate(data: dict, label: str, base: str | None, name: str | None) -> RackSpec:
    for key in data:
        if key not in ("rack", "fabric") and key not in SECTIONS:
            raise BadField(key, f"unknown section (expected rack, fabric, {', '.join(SECTIONS)})")
    rack = check_rack_section(data.get("rack", {}))
    fabric = check_fabric(data["fabric"]) if "fabric" in data else None
    if fabric is not None and rack["transport"] != "shm":
        raise BadField("fabric", f"needs rack.transport 'shm' (the {rack['transport']} transport "
                   "applies no interconnect model)")
    if base is None:  # embedded default: storage lives in the user's data dir, by spec name
        data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
        base = os.path.join(data_home, "splitrack", rack["name"])
    if name is not None:
        rack["name"] = name
    if not NAME.fullmatch(rack["name"]):
        raise BadField("rack.name", BAD_NAME.format(rack["name"]))
    spec = RackSpec(**rack, fabric=fabric, source=label)
    for section, kind in SECTIONS.items():
        entries = data.get(section, [])
        if not isinstance(entries, list):
            raise BadField(section, f"must be an array of tables ([[{section}]])")
        for i, entry in enumerate(entries):
            spec.components.append(check_component(entry, kind, f"{section}[{i}]", base))
    _check_rack(spec)
    _split_cpus(spec)
    for comp in spec.components:
        if comp["kind"] == "p" and comp["extcache"] < comp["ways"] * spec.line:
            raise BadField(f"{comp['id']}.extcache", f"{comp['extcache']} B cannot hold one set of "
                       f"{comp['ways']} lines of {spec.line} B")
    return spec


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


def _check_rack(spec: RackSpec) -> None:
    seen: dict[str, str] = {}
    nic_owner: dict[str, str] = {}
    for comp in spec.components:
        if comp["id"] in seen:
            raise BadField(comp["id"], "component id used twice")
        seen[comp["id"]] = comp["kind"]
        for ip in comp.get("nics", ()):
            if ip in nic_owner:
                raise BadField(f"{comp['id']}.nics", f"{ip} is also a NIC of {nic_owner[ip]}")
            nic_owner[ip] = comp["id"]
    for kind, label in (("p", "pcomponent"), ("m", "mcomponent")):
        if kind not in seen.values():
            raise BadField(label, f"a rack needs at least one {label}")
    if spec.loopback in nic_owner:
        raise BadField("rack.loopback", f"{spec.loopback} is a NIC of {nic_owner[spec.loopback]}")
    _check_pcomponent_nics(spec, nic_owner)


def _check_pcomponent_nics(spec: RackSpec, nic_owner: dict[str, str]) -> None:
    for comp in spec.components:
        if comp["kind"] != "p":
            continue
        if comp["nic"] is None and spec.nic_policy == "explicit":
            raise BadField(f"{comp['id']}.nic", "missing (rack.nic_policy is 'explicit')")
        if comp["nic"] is not None and comp["nic"] not in nic_owner:
            raise BadField(f"{comp['id']}.nic", f"{comp['nic']} is not a NIC of any ncomponent")
