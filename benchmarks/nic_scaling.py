"""NIC scaling for `splitrack bench tcp`: throughput with 1, 2 and 4 NICs.

For each NIC count k a rack like the benchmark's is started with its
nComponents replaced by k, one NIC each (127.0.0.11, .12, ...; the NIC's
processing is its nComponent's process, so more NICs are more of it), and
GNM's round-robin policy. CLIENTS tcp_server.py programs run on the rack's
pComponents in turn, each bound on the NIC that GNM gives its process; as
many plain client processes outside the rack start together (tcp_client.at)
and each takes `volume / CLIENTS` bytes from its server, in send()s of SIZE
bytes. The aggregate is all bytes over the time from the first start to the
last end. On a machine with few cores every process competes for them, so
the curve shows where the host, not the rack, stops it.
"""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.servers import server
from splitrack.rack import Rack
from splitrack.spec import load_spec

CLIENTS = 4
SIZE = 4096


def measure(spec: Any, nic_counts: tuple[int, ...], volume: int,
            advance: Callable[[], None]) -> list[dict[str, Any]]:
    out = []
    for k in nic_counts:
        rack_spec = _with_nics(load_spec(spec, name=f"bench-nics{k}-{os.getpid()}"), k)
        ps = [c["id"] for c in rack_spec.components if c["kind"] == "p"]
        with Rack(rack_spec) as rack, contextlib.ExitStack() as servers:
            env = dict(os.environ, SPLITRACK_RUN_ROOT=rack.run.root)
            addrs = [servers.enter_context(server(
                [sys.executable, "-m", "splitrack.cli", "run", "--name", rack_spec.name,
                 "--on", ps[i % len(ps)], "--", sys.executable, "-m", "benchmarks.tcp_server",
                 "nic"], env)) for i in range(CLIENTS)]
            share = volume // CLIENTS // SIZE * SIZE
            start = time.monotonic() + 1.0   # every client has started by then
            clients = [subprocess.Popen(
                [sys.executable, "-m", "benchmarks.tcp_client", json.dumps(
                    [{"kind": "at", "t": start},
                     {"kind": "tx", "ip": ip, "port": port, "size": SIZE, "total": share}])],
                cwd="/", stdout=subprocess.PIPE, text=True) for ip, port in addrs]
            results = []
            for c in clients:
                stdout, _ = c.communicate(timeout=900)
                if c.returncode != 0:
                    raise RuntimeError("a NIC-scaling client failed")
                results.append(json.loads(stdout)[1])
        seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
        out.append({"nics": k, "clients": CLIENTS, "nics_used": len({ip for ip, _ in addrs}),
                    "throughput_MBps": round(share * CLIENTS / 1e6 / seconds, 2)})
        advance()
    return out


def _with_nics(spec: Any, k: int) -> Any:
    """`spec` with k nComponents of one NIC each, and GNM spreading processes over them."""
    n = next(c for c in spec.components if c["kind"] == "n")
    others = [dict(c, nic=None) if c["kind"] == "p" else c
              for c in spec.components if c["kind"] != "n"]
    nics = [{**n, "id": f"n{i}", "nics": [f"127.0.0.{11 + i}"]} for i in range(k)]
    return dataclasses.replace(spec, nic_policy="round-robin", components=others + nics)
