"""GNM's NIC registry: which nComponent owns which NIC IP, and rack locality.

A NIC is an IPv4 address that an nMonitor binds real kernel sockets on (the
default rack: loopback aliases 127.0.0.11, 127.0.0.12). Each nMonitor registers
its NICs at setup; GNM answers "which nComponent owns IP x" and "is x a rack
IP" (the intra-rack shortcut asks this at connect()).

Interface:
    nics = NicRegistry()
    nics.register("n0", ["127.0.0.11"])   # EADDRINUSE if another nComponent owns one
    nics.owner("127.0.0.11") -> "n0"      # EADDRNOTAVAIL if no rack NIC
    nics.is_rack_ip("8.8.8.8") -> False
    nics.by_component() -> {"n0": ["127.0.0.11", ...]}
Bad addresses raise OSError(EINVAL). Allocation policies come with the network work.
"""

import errno
import ipaddress


def parse_ip(ip: object) -> str:
    """The canonical dotted form of an IPv4 address; EINVAL otherwise."""
    try:
        return str(ipaddress.IPv4Address(ip))  # type: ignore[arg-type]
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise OSError(errno.EINVAL, f"{ip!r} is not an IPv4 address") from None


class NicRegistry:
    def __init__(self) -> None:
        self._owner: dict[str, str] = {}

    def register(self, ncomponent: str, nics: list[str]) -> None:
        canonical = [parse_ip(ip) for ip in nics]
        for ip in canonical:
            holder = self._owner.get(ip)
            if holder is not None and holder != ncomponent:
                raise OSError(errno.EADDRINUSE, f"NIC {ip} is already owned by {holder}")
        for ip, holder in list(self._owner.items()):  # re-registration replaces the old set
            if holder == ncomponent:
                del self._owner[ip]
        for ip in canonical:
            self._owner[ip] = ncomponent

    def owner(self, ip: str) -> str:
        ip = parse_ip(ip)
        holder = self._owner.get(ip)
        if holder is None:
            raise OSError(errno.EADDRNOTAVAIL, f"{ip} is not a NIC of this rack")
        return holder

    def is_rack_ip(self, ip: str) -> bool:
        return parse_ip(ip) in self._owner

    def by_component(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for ip, holder in self._owner.items():
            out.setdefault(holder, []).append(ip)
        return out
