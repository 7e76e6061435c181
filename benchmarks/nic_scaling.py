"""Scaling for `splitrack bench tcp`: aggregate send throughput as NICs, and as
programs, are added.

`measure` (NIC scaling): for each NIC count k a rack like the benchmark's is
started with its nComponents replaced by k, one NIC each (127.0.0.11, .12,
...; the NIC's processing is its nComponent's process, so more NICs are more
of it), and GNM's round-robin policy, and CLIENTS programs stream at once.

`load` (programs at once): on the benchmark's own rack, one program alone,
then PROGRAMS at once: does the rack share two cores among them without
collapse? Its figure is the aggregate against one alone, beside the same for
the same server as plain Linux processes (LINUX_IP) in the same run.

Either way the programs are tcp_server.py on the rack's pComponents in turn
(DDIO), each bound on the NIC that GNM gives its process; as many plain client
processes outside the rack start together (tcp_client.at) and each takes what
its server send()s, SIZE bytes at a time, for `seconds`. The aggregate is all
bytes over the time from the first start to the last end. On a machine with
few cores every process competes for them, so the curves show where the
host, not the rack, stops it.
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.servers import LINUX_IP, server
from splitrack.rack import Rack
from splitrack.spec import load_spec

CLIENTS = 4
PROGRAMS = 8
SIZE = 4096
CLIENT_TIMEOUT_S = 900


def measure(spec: Any, nic_counts: tuple[int, ...], seconds: float,
            advance: Callable[[], None]) -> list[dict[str, Any]]:
    out = []
    for k in nic_counts:
        rack_spec = _with_nics(load_spec(spec, name=f"bench-nics{k}-{os.getpid()}"), k)
        with Rack(rack_spec) as rack:
            mbps, ips = _aggregate(rack, CLIENTS, seconds)
        out.append({"nics": k, "clients": CLIENTS, "nics_used": len(ips),
                    "throughput_MBps": mbps})
        advance()
    return out


def load(rack: Rack, seconds: float, advance: Callable[[], None]) -> dict[str, Any]:
    """One program alone, then PROGRAMS at once: on `rack`, then as plain processes."""
    out: dict[str, Any] = {"programs": PROGRAMS}
    for prefix, on in (("", rack), ("linux_", None)):
        one, _ = _aggregate(on, 1, seconds)
        many, _ = _aggregate(on, PROGRAMS, seconds)
        out.update({f"{prefix}one_MBps": one, f"{prefix}all_MBps": many,
                    f"{prefix}ratio": round(many / one, 3)})
    advance()
    return out


def _aggregate(rack: Rack | None, programs: int, seconds: float
               ) -> tuple[float, set[str]]:
    """`programs` servers on `rack` (None: plain processes on LINUX_IP) streaming
    to as many clients at once: the aggregate MB/s, and the NICs of the servers."""
    program = [sys.executable, "-m", "benchmarks.tcp_server"]
    with contextlib.ExitStack() as servers:
        if rack is None:
            addrs = [servers.enter_context(server([*program, LINUX_IP], None))
                     for _ in range(programs)]
        else:
            ps = [c["id"] for c in rack.spec.components if c["kind"] == "p"]
            env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
            addrs = [servers.enter_context(server(
                [sys.executable, "-m", "splitrack.cli", "run", "--name", rack.spec.name,
                 "--on", ps[i % len(ps)], "--mode", "ddio", "--", *program, "nic"], env))
                for i in range(programs)]
        start = time.monotonic() + 1.0   # every client has started by then
        clients = [servers.enter_context(_client(
            [{"kind": "at", "t": start},
             {"kind": "tx", "ip": ip, "port": port, "size": SIZE, "seconds": seconds}]))
            for ip, port in addrs]
        results = []
        for c in clients:
            stdout, _ = c.communicate(timeout=CLIENT_TIMEOUT_S)
            if c.returncode != 0:
                raise RuntimeError("a scaling client failed")
            results.append(json.loads(stdout)[1])
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    mbps = round(sum(r["bytes"] for r in results) / 1e6 / span, 2)
    return mbps, {ip for ip, _ in addrs}


@contextlib.contextmanager
def _client(plan: list[dict[str, Any]]) -> Iterator[subprocess.Popen]:
    """A plain tcp_client.py process running `plan`; killed if still running at the end."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.tcp_client", json.dumps(plan)],
                            cwd="/", stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def _with_nics(spec: Any, k: int) -> Any:
    """`spec` with k nComponents of one NIC each, and GNM spreading processes over them."""
    n = next(c for c in spec.components if c["kind"] == "n")
    others = [dict(c, nic=None) if c["kind"] == "p" else c
              for c in spec.components if c["kind"] != "n"]
    nics = [{**n, "id": f"n{i}", "nics": [f"127.0.0.{11 + i}"]} for i in range(k)]
    return dataclasses.replace(spec, nic_policy="round-robin", components=others + nics)
