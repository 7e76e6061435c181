"""The values of a rack spec's fields: sizes, times, bandwidths, IPv4 addresses, CPUs.

Interface (spec.py re-exports the public names):
    parse_size("64MiB") -> 67108864         bytes: an int, or a number with a unit
    parse_time_ns("2us") -> 2000            0, or a number with ns, us, µs, ms or s
    parse_bandwidth("40Gbps") -> 5000000000 bytes a second; bits unless the unit is B/s
    check_name("default")                   a rack name as rack.name allows it
    SpecError                               the spec is not valid; names source and field

Invariant: each field validator here (field_size, field_time_ns, field_bandwidth,
field_positive_int, field_cpus, field_nics, field_ip, field_loopback) returns the
normalized value or raises BadField(where, problem), `where` being the field's path
(ncomponent[0].nics[1]); load_spec (spec.py) turns that into one SpecError line that
also names the source.
Nothing here reads a spec file; which table has which field is spec_tables.py's.
"""

import ipaddress
import os
import re
import socket
from collections.abc import Callable
from typing import Any

import psutil

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")
_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)\s*")
_TIME_NS = {"ns": 1, "us": 10**3, "µs": 10**3, "ms": 10**6, "s": 10**9}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKMGT]?)(bps|bit/s|B/s)\s*")
_RATE_PREFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
BANDWIDTH_MIN_BYTES_S = 125_000  # [fabric] bandwidth: at least 1 Mbit/s
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")   # rack.name
BAD_NAME = "{!r} is not 1-32 of [a-z0-9_-], starting with a letter or digit"
RACK_LOOPBACK = "127.0.0.1"


class SpecError(ValueError):
    """The rack spec is not valid; the message names the source and the field."""


class BadField(Exception):
    """A bad field of the spec being read: `where` its path, `problem` what is wrong
    (load_spec, spec.py, makes it a SpecError that also names the source)."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem


def check_name(name: str) -> str:
    """A rack name as rack.name allows it (it names a directory of the run root)."""
    if not NAME.fullmatch(name):
        raise SpecError(f"rack name {BAD_NAME.format(name)}")
    return name


def _checked(field: Callable[[Any, str], int], value: Any, where: str) -> int:
    """field(value, where), a BadField said as a SpecError (the parse_* functions)."""
    try:
        return field(value, where)
    except BadField as bad:
        raise SpecError(f"{bad.where}: {bad.problem}") from None


def parse_size(value: Any, where: str = "size") -> int:
    """Bytes from an int or a string such as '64MB' or '1GiB'; SpecError if not a size."""
    return _checked(field_size, value, where)


def field_size(value: Any, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and (m := _SIZE.fullmatch(value)) and m.group(2).upper() in _UNITS:
        n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    else:
        raise BadField(where, f"{value!r} is not a size (bytes, or e.g. '64MiB', '1GiB')")
    if n <= 0:
        raise BadField(where, f"{value!r} must be positive")
    return n


def parse_time_ns(value: Any, where: str = "time") -> int:
    """Nanoseconds from 0 or a string such as '500ns', '2us', '1.5ms'; SpecError if not."""
    return _checked(field_time_ns, value, where)


def parse_bandwidth(value: Any, where: str = "bandwidth") -> int:
    """Bytes a second from a string such as '40Gbps', '10Gbit/s' (bits), '5GB/s' (bytes)."""
    return _checked(field_bandwidth, value, where)


def field_time_ns(value: Any, where: str) -> int:
    if value == 0 and not isinstance(value, bool) or value == "0":
        return 0
    m = _TIME.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise BadField(where, f"{value!r} is not a time (0, or e.g. '500ns', '2us', '1.5ms')")
    return round(float(m.group(1)) * _TIME_NS[m.group(2)])


def field_bandwidth(value: Any, where: str) -> int:
    m = _RATE.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise BadField(where, f"{value!r} is not a bandwidth (e.g. '40Gbps', '10Gbit/s', "
                   "'5GB/s')")
    number, prefix, unit = m.groups()
    rate = float(number) * _RATE_PREFIX[prefix] / (1 if unit == "B/s" else 8)
    if rate < BANDWIDTH_MIN_BYTES_S:
        raise BadField(where, f"{value!r} is less than 1Mbps")
    return round(rate)


def field_positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise BadField(where, f"{value!r} is not a positive integer")
    return value


def field_cpus(value: Any, where: str) -> list[int]:
    """Host CPU numbers, each one this process may run on (sched_getaffinity)."""
    if not isinstance(value, list) or not value:
        raise BadField(where, "must be a non-empty list of host CPU numbers, e.g. [0]")
    host = os.sched_getaffinity(0)
    for i, cpu in enumerate(value):
        if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
            raise BadField(f"{where}[{i}]", f"{cpu!r} is not a CPU number (an integer >= 0)")
        if cpu not in host:
            raise BadField(f"{where}[{i}]", f"no CPU {cpu} on this host (it has "
                       f"{', '.join(map(str, sorted(host)))})")
    return sorted(set(value))


def field_nics(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise BadField(where, "must be a non-empty list of IPv4 addresses")
    nics, host = [], None
    for i, ip in enumerate(value):
        nics.append(field_ip(ip, f"{where}[{i}]"))
        if nics[-1] == RACK_LOOPBACK:
            raise BadField(f"{where}[{i}]", "127.0.0.1 is the rack's own loopback, not a NIC")
        if not ipaddress.IPv4Address(nics[-1]).is_loopback:
            host = _host_ips() if host is None else host   # asked once, if needed at all
            if nics[-1] not in host:
                raise BadField(f"{where}[{i}]", f"{nics[-1]} is not an address of this host "
                                            "(a NIC binds there: 127.0.0.0/8 or an interface's)")
    return nics


def _host_ips() -> set[str]:
    """The IPv4 addresses of this host's interfaces."""
    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET}


def field_ip(value: Any, where: str) -> str:
    if not isinstance(value, str):  # IPv4Address would take an int
        raise BadField(where, f"{value!r} is not an IPv4 address")
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise BadField(where, f"{value!r} is not an IPv4 address") from None


def field_loopback(value: Any) -> str:
    ip = field_ip(value, "rack.loopback")
    if ip == RACK_LOOPBACK or not ipaddress.IPv4Address(ip).is_loopback:
        raise BadField("rack.loopback",
                       f"{ip} is not an address of 127.0.0.0/8 other than 127.0.0.1")
    return ip
