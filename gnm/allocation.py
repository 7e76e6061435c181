"""GNM's NIC allocation: which NIC a process's unbound sockets use.

A socket that its program never bound to an address still needs a NIC; GNM
picks one per process (GNM_ALLOCATE, docs/gnm.md). Policies (rack.nic_policy):

    round-robin   successive new processes get successive NICs, in registration
                  order: nComponents as they registered, each one's NICs in
                  spec order.
    least-loaded  the NIC with the fewest live sockets; ties: fewest bytes, then
                  the lowest address. A NIC's load is its nMonitor's last report
                  plus one socket per process allocated to it since that report
                  (so a burst of new processes spreads before the next report).
    explicit      the pComponent's configured NIC ([[pcomponent]] nic).
A pComponent with a configured NIC uses it under every policy; the policy
chooses for the others. Slices (monitors/slices.py): the caller names the
nComponents the process may use (`within`: those of its slice; None: all), and
the policy chooses among their NICs only; a configured NIC outside them, or
none at all, is EADDRNOTAVAIL.

Interface:
    alloc = NicAllocator("round-robin", nics, explicit={"p0": "127.0.0.11"})
    alloc.allocate("p1.12345") -> "127.0.0.12"      # process id: pComponent.PID
    alloc.allocate("p1.12345", within={"n1"})       # only NICs of these nComponents
    alloc.report("n0", {"127.0.0.11": {"sockets": 3, "bytes": 1234}})
    alloc.loads() -> {"127.0.0.11": {"sockets": 3, "bytes": 1234, "pending": 0}, ...}

Invariants: allocation is sticky, the same process id gets the same NIC while
that NIC is registered; GNM remembers at most STICKY_MAX processes and forgets
the least recently allocated first (a forgotten process may get another NIC
for its next unbound socket; sockets already bound keep theirs).
Errors: OSError(EINVAL) for a bad process id, policy or report;
OSError(EADDRNOTAVAIL) when the rack has no NIC, or the process's pComponent
has no registered configured NIC under "explicit".
"""

import errno
import ipaddress
import re
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from gnm.nic_registry import NicRegistry, parse_ip

POLICIES = ("round-robin", "least-loaded", "explicit")
STICKY_MAX = 4096   # processes whose NIC GNM remembers (GNM's one tunable; it sits below
#                     splitrack, whose params.py says so)
_PROCESS = re.compile(r"(p\d{1,4})\.([1-9]\d{0,9})")


def split_process_id(process_id: object) -> tuple[str, int]:
    """("p0", 12345) for "p0.12345"; EINVAL otherwise."""
    m = _PROCESS.fullmatch(process_id) if isinstance(process_id, str) else None
    if m is None:
        raise OSError(errno.EINVAL, f"{process_id!r} is not a process id like 'p0.12345'")
    return m.group(1), int(m.group(2))


class NicAllocator:
    def __init__(self, policy: str, registry: NicRegistry,
                 explicit: dict[str, str] | None = None, sticky_max: int = STICKY_MAX):
        if policy not in POLICIES:
            raise OSError(errno.EINVAL,
                          f"NIC policy {policy!r} is not one of {', '.join(POLICIES)}")
        self.policy = policy
        self.registry = registry
        self.explicit = {p: parse_ip(ip) for p, ip in (explicit or {}).items()}
        self.sticky_max = sticky_max
        self._sticky: OrderedDict[str, str] = OrderedDict()   # process id -> NIC
        self._reported: dict[str, tuple[int, int]] = {}       # NIC -> (sockets, bytes)
        self._pending: dict[str, int] = {}   # NIC -> processes allocated since its last report
        self._cursor = 0                     # round-robin: index of the next NIC

    def allocate(self, process_id: str, within: Collection[str] | None = None) -> str:
        pcomponent, _ = split_process_id(process_id)
        nics = self._nics(within)
        ip = self._sticky.get(process_id)
        if ip is None or ip not in nics:
            ip = self._choose(pcomponent, nics)
            self._pending[ip] = self._pending.get(ip, 0) + 1
        self._sticky[process_id] = ip
        self._sticky.move_to_end(process_id)
        while len(self._sticky) > self.sticky_max:
            self._sticky.popitem(last=False)
        return ip

    def forget(self, process_id: str) -> None:
        """The process ended: its NIC need not be remembered."""
        self._sticky.pop(process_id, None)

    def report(self, ncomponent: str, nics: dict[str, Any]) -> None:
        """The load of ncomponent's NICs now; a NIC it does not mention is idle."""
        if not isinstance(nics, dict):
            raise OSError(errno.EINVAL, "a NIC load report is {ip: {sockets, bytes}}")
        owned = self.registry.by_component().get(ncomponent, [])
        loads = {}
        for ip, load in nics.items():
            ip = parse_ip(ip)
            if ip not in owned:
                raise OSError(errno.EINVAL, f"{ip} is not a NIC of {ncomponent}")
            loads[ip] = (_count(load, "sockets", ip), _count(load, "bytes", ip))
        for ip in owned:
            self._reported[ip] = loads.get(ip, (0, 0))
            self._pending.pop(ip, None)

    def loads(self) -> dict[str, dict[str, int]]:
        out = {}
        for ip in self._nics():
            sockets, nbytes = self._reported.get(ip, (0, 0))
            out[ip] = {"sockets": sockets, "bytes": nbytes, "pending": self._pending.get(ip, 0)}
        return out

    def _nics(self, within: Collection[str] | None = None) -> list[str]:
        return [ip for n, ips in self.registry.by_component().items()
                if within is None or n in within for ip in ips]

    def _choose(self, pcomponent: str, nics: list[str]) -> str:
        if not nics:
            raise OSError(errno.EADDRNOTAVAIL, "this rack has no NIC" if not self._nics()
                          else f"no NIC of this rack may serve {pcomponent}'s processes: "
                          "none is of their slice (or free, for a free pComponent)")
        pinned = self.explicit.get(pcomponent)
        if pinned is not None:
            if pinned not in nics:
                where = "in its slice" if pinned in self._nics() else "registered"
                raise OSError(errno.EADDRNOTAVAIL, f"{pcomponent}'s NIC {pinned} is not {where}")
            return pinned
        if self.policy == "explicit":
            raise OSError(errno.EADDRNOTAVAIL, f"no NIC is configured for {pcomponent}")
        if self.policy == "round-robin":
            ip = nics[self._cursor % len(nics)]
            self._cursor += 1
            return ip
        return min(nics, key=self._load_key)

    def _load_key(self, ip: str) -> tuple[int, int, int]:
        sockets, nbytes = self._reported.get(ip, (0, 0))
        return sockets + self._pending.get(ip, 0), nbytes, int(ipaddress.IPv4Address(ip))


def _count(load: Any, name: str, ip: str) -> int:
    value = load.get(name) if isinstance(load, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise OSError(errno.EINVAL, f"load of {ip}: {name!r} missing or not a count")
    return value
